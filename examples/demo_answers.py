"""The demo's canned answers: what the offline model says to the four steps of ``agent_task.py``.

The demo runs with no endpoint or key: each of its chat nodes gets :data:`demo_answer` as its ``offline_answer``.
It picks an answer by the kind of step the system prompt asks for (analyse, write code, check for errors, write tests)
and fills it from the request. It knows the demo's task ("write a weather lookup function", also async or in
Fahrenheit) well and anything else only generically. Every answer is tagged ``graphckpt-offline #<prompt digest>``,
so a changed prompt visibly changes the answer; the same prompt gives the same answer byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodes.offline import OFFLINE_MODEL, OfflineAnswer, message_text, prompt_digest, scripted

__all__ = ["demo_answer"]

_CODE_BLOCK = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


def _subject(user: str) -> str:
    """The request, as the first non-empty line of the user text, without a leading ``Request:`` label."""
    for line in user.splitlines():
        line = line.strip()
        if line:
            return re.sub(r"^(request|task)\s*:\s*", "", line, flags=re.IGNORECASE)[:100]
    return "the request"


def _function_name(subject: str) -> str:
    words = re.findall(r"[a-z0-9]+", subject.lower())
    drop = {"write", "a", "an", "the", "function", "that", "please", "python", "create", "implement"}
    kept = [w for w in words if w not in drop][:3]
    name = "_".join(kept) or "solve"
    return name if not name[0].isdigit() else f"f_{name}"


def _flags(user: str) -> dict[str, bool]:
    lowered = user.lower()
    return {
        "async": "async" in lowered,
        "fahrenheit": "fahrenheit" in lowered or "imperial" in lowered,
        "weather": "weather" in lowered,
    }


# ----------------------------------------------------------------------------------------------------- the answers


def _analyse(user: str, tag: str) -> str:
    subject, flags = _subject(user), _flags(user)
    if not flags["weather"]:
        return (
            f"[{tag}] Analysis of: {subject}\n"
            f"- Goal: a function `{_function_name(subject)}` that does what the request asks.\n"
            "- Inputs and outputs: typed parameters, a plain-data return value.\n"
            "- Errors to handle: invalid input (ValueError), missing data (LookupError).\n"
            "- Plan: write the code, check it for errors, write unit tests."
        )
    unit = "degrees Fahrenheit" if flags["fahrenheit"] else "degrees Celsius"
    style = "an async function using httpx" if flags["async"] else "a plain function using the standard library"
    return (
        f"[{tag}] Analysis of: {subject}\n"
        f"- Goal: `get_weather(city)` returns the current temperature ({unit}), wind speed and weather code.\n"
        "- Data source: the free Open-Meteo API (geocoding, then forecast); no API key needed.\n"
        f"- Shape: {style}, with a timeout on every HTTP call.\n"
        "- Errors to handle: empty city (ValueError), unknown city (LookupError), network failure or timeout.\n"
        "- Plan: write the code, check it for errors, write unit tests with the network mocked."
    )


_WEATHER_SYNC = '''import json
import urllib.parse
import urllib.request

GEOCODE_URL = "https://geocoding-api.open-meteo.com/v1/search"
FORECAST_URL = "https://api.open-meteo.com/v1/forecast"


def _get_json(url: str, params: dict[str, object], timeout: float) -> dict:
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=timeout) as resp:
        return json.load(resp)


def get_weather(city: str, timeout: float = 10.0) -> dict:
    """Current weather for ``city``: temperature, wind speed (km/h) and WMO weather code."""
    if not city.strip():
        raise ValueError("city must not be empty")
    places = _get_json(GEOCODE_URL, {"name": city, "count": 1}, timeout).get("results") or []
    if not places:
        raise LookupError(f"unknown city: {city}")
    params = {"latitude": places[0]["latitude"], "longitude": places[0]["longitude"], "current_weather": "true"UNIT}
    current = _get_json(FORECAST_URL, params, timeout)["current_weather"]
    return {"city": city, "TEMP": current["temperature"], "wind_kmh": current["windspeed"],
            "code": current["weathercode"]}
'''

_WEATHER_ASYNC = '''import httpx

GEOCODE_URL = "https://geocoding-api.open-meteo.com/v1/search"
FORECAST_URL = "https://api.open-meteo.com/v1/forecast"


async def get_weather(city: str, timeout: float = 10.0) -> dict:
    """Current weather for ``city``: temperature, wind speed (km/h) and WMO weather code."""
    if not city.strip():
        raise ValueError("city must not be empty")
    async with httpx.AsyncClient(timeout=timeout) as client:
        geo = await client.get(GEOCODE_URL, params={"name": city, "count": 1})
        geo.raise_for_status()
        places = geo.json().get("results") or []
        if not places:
            raise LookupError(f"unknown city: {city}")
        params = {"latitude": places[0]["latitude"], "longitude": places[0]["longitude"], "current_weather": "true"UNIT}
        resp = await client.get(FORECAST_URL, params=params)
        resp.raise_for_status()
    current = resp.json()["current_weather"]
    return {"city": city, "TEMP": current["temperature"], "wind_kmh": current["windspeed"],
            "code": current["weathercode"]}
'''


def _code(user: str, tag: str) -> str:
    subject, flags = _subject(user), _flags(user)
    if flags["weather"]:
        source = _WEATHER_ASYNC if flags["async"] else _WEATHER_SYNC
        unit = ', "temperature_unit": "fahrenheit"' if flags["fahrenheit"] else ""
        source = source.replace("UNIT", unit).replace("TEMP", "temp_f" if flags["fahrenheit"] else "temp_c")
    else:
        name = _function_name(subject)
        source = (
            f"def {name}(value: str) -> str:\n"
            f'    """{subject}."""\n'
            "    if not value:\n"
            '        raise ValueError("value must not be empty")\n'
            "    return value.strip()\n"
        )
    return f"```python\n# {tag}: deterministic built-in model, no API call was made\n{source}```"


def _check(user: str, tag: str) -> str:
    blocks = _CODE_BLOCK.findall(user)
    findings: list[str] = []
    for block in blocks:
        try:
            compile(block, "<generated>", "exec")
        except SyntaxError as exc:
            findings.append(f"syntax error at line {exc.lineno}: {exc.msg}")
    code = "\n".join(blocks) or user
    if "timeout" not in code:
        findings.append("HTTP calls have no timeout")
    if "raise " not in code:
        findings.append("invalid input is not rejected")
    lines = [f"[{tag}] Checked {len(blocks)} code block(s) for errors."]
    if findings:
        lines += [f"- {finding}" for finding in findings]
        lines.append("Verdict: fix")
    else:
        lines += [
            "- compiles without syntax errors",
            "- every HTTP call has a timeout" if "http" in code.lower() else "- no I/O without bounds",
            "- invalid input raises a clear exception",
            "Verdict: ok",
        ]
    return "\n".join(lines)


def _tests(user: str, tag: str) -> str:
    flags = _flags(user)
    if not flags["weather"]:
        name = _function_name(_subject(user))
        body = (
            "import pytest\n\n"
            f"from solution import {name}\n\n\n"
            f"def test_{name}_strips_input():\n"
            f'    assert {name}("  x  ") == "x"\n\n\n'
            f"def test_{name}_rejects_empty_input():\n"
            "    with pytest.raises(ValueError):\n"
            f'        {name}("")\n'
        )
        return f"```python\n# {tag}: deterministic built-in model\n{body}```"
    temp = "temp_f" if flags["fahrenheit"] else "temp_c"
    if flags["async"] or "async def get_weather" in user:
        body = (
            "import httpx\nimport pytest\nimport respx\n\nfrom weather import get_weather\n\n\n"
            "@respx.mock\nasync def test_returns_current_weather():\n"
            '    respx.get(url__regex=r".*geocoding.*").respond(json={"results": [{"latitude": 1, "longitude": 2}]})\n'
            '    respx.get(url__regex=r".*forecast.*").respond(\n'
            '        json={"current_weather": {"temperature": 21.5, "windspeed": 7.0, "weathercode": 1}}\n'
            "    )\n"
            f'    assert (await get_weather("Paris"))["{temp}"] == 21.5\n\n\n'
            "@respx.mock\nasync def test_unknown_city_raises_lookup_error():\n"
            '    respx.get(url__regex=r".*geocoding.*").respond(json={"results": []})\n'
            "    with pytest.raises(LookupError):\n"
            '        await get_weather("Atlantis")\n'
        )
    else:
        body = (
            "from unittest import mock\n\nimport pytest\n\nimport weather\n\n\n"
            "def test_returns_current_weather():\n"
            "    replies = [\n"
            '        {"results": [{"latitude": 1, "longitude": 2}]},\n'
            '        {"current_weather": {"temperature": 21.5, "windspeed": 7.0, "weathercode": 1}},\n'
            "    ]\n"
            '    with mock.patch.object(weather, "_get_json", side_effect=replies):\n'
            f'        assert weather.get_weather("Paris")["{temp}"] == 21.5\n\n\n'
            "def test_unknown_city_raises_lookup_error():\n"
            '    with mock.patch.object(weather, "_get_json", return_value={"results": []}):\n'
            "        with pytest.raises(LookupError):\n"
            '            weather.get_weather("Atlantis")\n'
        )
    body += "\n\ndef test_empty_city_is_rejected():\n    with pytest.raises(ValueError):\n"
    body += '        weather.get_weather(" ")\n'
    if flags["async"] or "async def get_weather" in user:
        body = body.replace('weather.get_weather(" ")', 'await get_weather(" ")').replace(
            "def test_empty_city", "async def test_empty_city"
        )
    return f"```python\n# {tag}: deterministic built-in model, no API call was made\n{body}```"


def _general(user: str, tag: str) -> str:
    return f"[{tag}] Noted: {_subject(user)}. (Offline model: set OPENAI_BASE_URL or OPENAI_API_KEY for a real one.)"


def _step(answer: Callable[[str, str], str]) -> OfflineAnswer:
    """An answer function: ``answer(user text, tag)`` on the messages."""

    def run(messages: Sequence[Mapping[str, Any]]) -> str:
        user = "\n".join(message_text(m.get("content")) for m in messages if m.get("role") == "user")
        return answer(user, f"{OFFLINE_MODEL} #{prompt_digest(messages)}")

    return run


# The step kinds, tried in this order against the system prompt (then, failing that, the user messages).
_STEPS: tuple[tuple[tuple[str, ...], Callable[[str, str], str]], ...] = (
    (("unit test", "write tests", "tests for", "pytest", "test case"), _tests),
    (("check", "review", "error", "bug", "verify"), _check),
    (("analyse", "analyze", "analysis", "plan", "requirement"), _analyse),
    (("code", "implement", "function", "program", "write"), _code),
)

demo_answer: OfflineAnswer = scripted(
    [(phrase, _step(answer)) for phrases, answer in _STEPS for phrase in phrases], default=_step(_general)
)
"""The offline answer for every step of the demo."""
