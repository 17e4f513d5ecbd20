// LangGraph's JavaScript client (@langchain/langgraph-sdk) against a real `graphckpt serve`, driven by
// tests/js/test_js_client.py: node client.mjs URL. One JSON object per line on stdout, one per phase; after the
// "cut" line it waits for a line on stdin (the test lets the model go on) before it reconnects.
import { createInterface } from "node:readline";
import { Client } from "@langchain/langgraph-sdk";

const url = process.argv[2];
const client = new Client({ apiUrl: url });
const modes = ["values", "messages-tuple", "updates"];
const t0 = Date.now();
const say = (phase, data) => process.stdout.write(JSON.stringify({ phase, ms: Date.now() - t0, ...data }) + "\n");
const part = ({ id, event, data }) => ({ id: id ?? null, event, data });
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const thread = await client.threads.create({ metadata: { client: "node" } });
const tid = thread.thread_id;
say("thread", { thread });

// a run streamed with three modes, cut after the first piece of the model's answer (the run goes on)
let run = null;
const cut = new AbortController();
const first = [];
try {
  for await (const p of client.runs.stream(tid, "chat", {
    input: { messages: [{ type: "human", content: "hello from node" }] },
    streamMode: modes,
    streamResumable: true,
    onDisconnect: "continue",
    signal: cut.signal,
    onRunCreated: (meta) => {
      run = meta;
    },
  })) {
    first.push(part(p));
    if (p.event === "messages") cut.abort();
  }
} catch (error) {
  if (error?.name !== "AbortError") throw error;
}
say("cut", { run, first });
await lines.next();

// reconnect with the last event id seen: the rest of the run, nothing twice
const rest = [];
for await (const p of client.runs.joinStream(tid, run.run_id, { lastEventId: first.at(-1).id, streamMode: modes })) {
  rest.push(part(p));
}
// joined again with the client's defaults (no modes, no id): the whole run, in the modes it was started with
const again = [];
for await (const p of client.runs.joinStream(tid, run.run_id)) again.push(part(p));
const interrupted = await client.threads.get(tid);
const pending = await client.threads.getState(tid);
say("joined", { rest, again, run: await client.runs.get(tid, run.run_id), thread: interrupted, state: pending });

// answer the interrupt with command.resume
const resumed = [];
let resumedRun = null;
for await (const p of client.runs.stream(tid, "chat", {
  command: { resume: "yes" },
  streamMode: modes,
  onRunCreated: (meta) => {
    resumedRun = meta;
  },
})) {
  resumed.push(part(p));
}
// the thread's stream, from its first event (the sdk's "0"), in two modes: both turns, then its end
const threadParts = [];
for await (const p of client.threads.joinStream(tid, { lastEventId: "0", streamMode: ["values", "updates"] })) {
  threadParts.push(part(p));
}
say("resumed", {
  threadParts,
  resumed,
  run: await client.runs.get(tid, resumedRun.run_id),
  thread: await client.threads.get(tid),
  state: await client.threads.getState(tid),
  history: (await client.threads.getHistory(tid, { limit: 20 })).length,
});
// LangGraph's "messages" mode: the answer as messages/metadata, messages/partial (the text so far), messages/complete
const other = (await client.threads.create()).thread_id;
const assembled = [];
for await (const p of client.runs.stream(other, "chat", {
  input: { messages: [{ type: "human", content: "partial please" }] },
  streamMode: "messages",
})) {
  assembled.push(part(p));
}
say("assembled", { assembled });

// onDisconnect: "cancel" (what useStream sends unless its streams are resumable): leaving cancels the run
const counter = (await client.threads.create()).thread_id;
const leave = new AbortController();
let left = null;
const seen = [];
try {
  for await (const p of client.runs.stream(counter, "counter", {
    input: { limit: 400 },
    streamMode: ["values"],
    onDisconnect: "cancel",
    signal: leave.signal,
    onRunCreated: (meta) => {
      left = meta;
    },
  })) {
    if (p.event === "values") seen.push(p.data.n);
    if (seen.length === 2) leave.abort();
  }
} catch (error) {
  if (error?.name !== "AbortError") throw error;
}
let after = await client.runs.get(counter, left.run_id);
for (let i = 0; i < 200 && ["pending", "running"].includes(after.status); i += 1) {
  await new Promise((resolve) => setTimeout(resolve, 50));
  after = await client.runs.get(counter, left.run_id);
}
say("left", { seen, run: after, state: await client.threads.getState(counter) });
lines.return?.();
process.exit(0);
