"""A ReAct agent with tools and ``add_messages``, written the LangGraph way; only the imports are graphckpt's.

The model is a small deterministic stand-in (no network): it asks for the weather tool once per city named in the
question, then answers from the tool results. ``python examples/lg_react_agent.py`` runs it on SQLite.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypedDict

from graphckpt import END, START, StateGraph, add_messages

# -- the graph (the part that is the same in LangGraph) ------------------------------------------------------------

TEMPERATURES = {"paris": 18, "oslo": 4, "lima": 22}


def get_weather(city: str) -> str:
    """The tool: today's temperature in a city."""
    return f"{TEMPERATURES.get(city.lower(), 15)} C in {city}"


class AgentState(TypedDict):
    messages: Annotated[list[dict[str, Any]], add_messages]


def call_model(state: AgentState) -> dict[str, Any]:
    messages = state["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user")
    asked = {json.loads(c["args"])["city"] for m in messages for c in m.get("tool_calls", [])}
    wanted = [c for c in TEMPERATURES if c in question.lower() and c not in asked]
    if wanted:
        calls = [{"id": f"call_{c}", "name": "get_weather", "args": json.dumps({"city": c})} for c in wanted]
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": calls, "id": f"ai_{len(messages)}"}]}
    facts = "; ".join(m["content"] for m in messages if m["role"] == "tool")
    return {"messages": [{"role": "assistant", "content": f"Here is the weather: {facts}.", "id": "final"}]}


def call_tools(state: AgentState) -> dict[str, Any]:
    last = state["messages"][-1]
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": get_weather(**json.loads(c["args"])), "id": f"t_{c['id']}"}
        for c in last["tool_calls"]
    ]
    return {"messages": results}


def should_continue(state: AgentState) -> str:
    return "tools" if state["messages"][-1].get("tool_calls") else END


builder = StateGraph(AgentState)
builder.add_node("agent", call_model)
builder.add_node("tools", call_tools)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", should_continue, ["tools", END])
builder.add_edge("tools", "agent")

# -- running it with graphckpt -------------------------------------------------------------------------------------


def main(db: str = "react.db") -> str:
    from graphckpt.savers.sqlite import SqliteSaver

    with builder.compile(saver=SqliteSaver(db)) as app:
        question = {"role": "user", "content": "Weather in Paris and Oslo?", "id": "q"}
        answer: str = app.invoke({"messages": [question]}).values["messages"][-1]["content"]
        return answer


if __name__ == "__main__":
    print(main())
