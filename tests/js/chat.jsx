// A chat page on LangGraph's React hook `useStream` (@langchain/langgraph-sdk/react), bundled by build.mjs and
// driven in headless Chromium by tests/js/test_js_use_stream.py against `graphckpt serve`. The API's address is
// the page's `?api=` parameter; the thread id goes into the page's URL once the hook has one, so a reload (or a
// restarted server) continues the same chat; `reconnectOnMount` rejoins a run that was streaming.
import { useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";

const params = new URLSearchParams(window.location.search);

function kind(message) {
  return typeof message.getType === "function" ? message.getType() : message.type;
}

function text(message) {
  const content = message.content;
  if (typeof content === "string") return content;
  return (content ?? []).map((block) => block.text ?? "").join("");
}

function Chat() {
  const [threadId, setThreadId] = useState(params.get("thread"));
  const [draft, setDraft] = useState("");
  const stream = useStream({
    apiUrl: params.get("api"),
    assistantId: "chat",
    messagesKey: "messages",
    threadId,
    reconnectOnMount: true,
    onThreadId: (id) => {
      setThreadId(id);
      const url = new URL(window.location.href);
      url.searchParams.set("thread", id);
      window.history.replaceState(null, "", url);
    },
  });
  const pending = stream.interrupt;
  const send = (event) => {
    event.preventDefault();
    if (!draft.trim()) return;
    stream.submit({ messages: [{ type: "human", content: draft }] });
    setDraft("");
  };
  const answer = (verdict) => stream.submit(null, { command: { resume: verdict } });
  return (
    <main>
      <h1>Approval chat</h1>
      <p id="thread" data-thread={threadId ?? ""}>
        thread {threadId ?? "(new)"}
      </p>
      <ol id="messages" aria-live="polite">
        {stream.messages.map((message, i) => (
          <li key={message.id ?? i} data-type={kind(message)} data-id={message.id ?? ""}>
            {text(message)}
          </li>
        ))}
      </ol>
      {pending ? (
        <section id="approval" aria-label="approval">
          <p className="question">{pending.value?.question}</p>
          <blockquote className="draft">{pending.value?.draft}</blockquote>
          <button type="button" onClick={() => answer("yes")}>
            Approve
          </button>
          <button type="button" onClick={() => answer("no")}>
            Reject
          </button>
        </section>
      ) : null}
      <form onSubmit={send}>
        <label>
          Message <input name="message" value={draft} onChange={(e) => setDraft(e.target.value)} />
        </label>
        <button type="submit" disabled={stream.isLoading}>
          Send
        </button>
      </form>
      <p id="status" data-loading={stream.isLoading ? "yes" : "no"}>
        {stream.isLoading ? "working" : "ready"}
      </p>
      <p id="error">{stream.error ? String(stream.error) : ""}</p>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
