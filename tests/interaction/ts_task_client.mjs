// A TypeScript-SDK task client (its experimental tasks API), driven by tests/interaction/test_tasks_ts.py.
//
//   node ts_task_client.mjs http <url> <bearer>      Streamable HTTP
//   node ts_task_client.mjs stdio <command> <args…>  a stdio server (manifold stdio)
//
// Runs server-everything's research task twice through whatever it is pointed at: once ambiguous
// (answering the elicitation it asks during the task with "snake"), once cancelled while it works.
// Prints one JSON line: what the stream yielded, the result's text, the cancellation, the list.
import { Client } from "../npm/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js";
import { StreamableHTTPClientTransport } from "../npm/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js";
import { StdioClientTransport } from "../npm/node_modules/@modelcontextprotocol/sdk/dist/esm/client/stdio.js";
import { CallToolResultSchema, ElicitRequestSchema } from "../npm/node_modules/@modelcontextprotocol/sdk/dist/esm/types.js";

const [mode, target, ...rest] = process.argv.slice(2);
const transport =
  mode === "http"
    ? new StreamableHTTPClientTransport(new URL(target), {
        requestInit: { headers: rest[0] ? { Authorization: `Bearer ${rest[0]}` } : {} },
      })
    : new StdioClientTransport({ command: target, args: rest, stderr: "ignore" });
const client = new Client({ name: "ts-task-client", version: "0" }, { capabilities: { elicitation: {} } });
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: "accept", content: { interpretation: "snake" } };
});
const deadline = setTimeout(() => {
  console.error("ts_task_client: no end within 60 s");
  process.exit(3);
}, 60_000);
await client.connect(transport);
const tools = (await client.listTools()).tools;
const name = tools.map((t) => t.name).find((n) => n.endsWith("simulate-research-query"));

const seen = [];
let text = null;
let taskId = null;
for await (const message of client.experimental.tasks.callToolStream(
  { name, arguments: { topic: "python", ambiguous: true } },
  CallToolResultSchema,
  { task: { ttl: 60_000 } },
)) {
  seen.push(message.type === "taskStatus" ? `status:${message.task.status}` : message.type);
  if (message.type === "taskCreated") taskId = message.task.taskId;
  if (message.type === "result") text = message.result.content[0].text;
  if (message.type === "error") text = `error: ${message.error.message}`;
}

let cancelled = null;
for await (const message of client.experimental.tasks.callToolStream(
  { name, arguments: { topic: "tides" } },
  CallToolResultSchema,
  { task: { ttl: 60_000 } },
)) {
  if (message.type === "taskCreated") {
    cancelled = (await client.experimental.tasks.cancelTask(message.task.taskId)).status;
    break;
  }
}
const listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
let unknown = null;
try {
  await client.experimental.tasks.getTask("9a6c8714f6964ea783dcac315461b495");
} catch (error) {
  unknown = { code: error.code, message: error.message };
}
console.log(JSON.stringify({ seen, text, taskId, asked, cancelled, listed, unknown }));
clearTimeout(deadline);
await client.close();
