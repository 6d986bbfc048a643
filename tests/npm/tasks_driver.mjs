// Drives server-everything's task tools with the TypeScript SDK's experimental tasks client API
// (SEP-1686, protocol 2025-11-25) and prints one JSON report on stdout.
//
//   node tasks_driver.mjs --url http://127.0.0.1:PORT/mcp [--prefix ev.] [--only a,b] [--timeout-ms N]
//   node tasks_driver.mjs --stdio '["/path/to/command", "arg"]' [--prefix ev.]
//
// --prefix is put before every tool name (a gateway namespaces them: "ev.simulate-research-query").
// The client declares elicitation, sampling and tasks (list, cancel, and task-augmented
// elicitation/create and sampling/createMessage), holds its own tasks in the SDK's in-memory
// store (the server polls them with tasks/get and reads them with tasks/result), answers every
// elicitation with fixed values and every sampling request with a fixed text.
//
// Scenarios (each one's outcome is a key of the report; a failed scenario records its error and
// the others still run):
//   research          callToolStream on simulate-research-query: taskCreated, statuses, result
//   input_required    the same with ambiguous=true: input_required, the elicitation answered
//                     through tasks/result, the answer in the result
//   polled            tools/call with params.task by hand, tasks/get until terminal, tasks/result,
//                     then tasks/get and tasks/list on the finished task
//   cancelled         a research task cancelled with tasks/cancel, then tasks/get says cancelled
//                     and tasks/result answers an error
//   elicitation_async trigger-elicitation-request-async: the server's elicitation/create asks the
//                     client for a task; the server polls it and reads the answer
//   sampling_async    trigger-sampling-request-async, the same with sampling/createMessage
//   unknown_task      tasks/get, tasks/result and tasks/cancel on an id nobody created
// The report also lists every notifications/tasks/status the client received and every request
// the server sent the client (method, whether params.task was set, the related task id).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTaskStore } from "@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js";
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  CreateTaskResultSchema,
  ElicitRequestSchema,
  TaskStatusNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const SCENARIOS = [
  "research",
  "input_required",
  "polled",
  "cancelled",
  "elicitation_async",
  "sampling_async",
  "unknown_task",
];
const RELATED_TASK = "io.modelcontextprotocol/related-task";

function parseArgs(argv) {
  const options = { prefix: "", only: SCENARIOS, timeoutMs: 60000 };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--url") options.url = value;
    else if (flag === "--stdio") options.stdio = JSON.parse(value);
    else if (flag === "--prefix") options.prefix = value;
    else if (flag === "--only") options.only = value.split(",");
    else if (flag === "--timeout-ms") options.timeoutMs = Number(value);
    else throw new Error(`unknown option ${flag}`);
  }
  if (!options.url === !options.stdio) throw new Error("give exactly one of --url and --stdio");
  const unknown = options.only.filter((name) => !SCENARIOS.includes(name));
  if (unknown.length) throw new Error(`unknown scenarios: ${unknown.join(", ")}`);
  return options;
}

function errorOf(error) {
  return { code: error?.code ?? null, message: String(error?.message ?? error) };
}

function texts(result) {
  return (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text);
}

function makeClient(seen) {
  const client = new Client(
    { name: "manifold-tasks-driver", version: "1.0.0" },
    {
      capabilities: {
        elicitation: { form: {} },
        sampling: {},
        tasks: {
          list: {},
          cancel: {},
          requests: { elicitation: { create: {} }, sampling: { createMessage: {} } },
        },
      },
      taskStore: new InMemoryTaskStore(),
      defaultTaskPollInterval: 200,
    },
  );
  // A request the server sent; with params.task the answer is kept as a client-side task.
  const answer = async (request, extra, result) => {
    seen.requests.push({
      method: request.method,
      task: request.params.task !== undefined,
      relatedTask: request.params._meta?.[RELATED_TASK]?.taskId ?? null,
    });
    if (request.params.task && extra.taskStore) {
      const task = await extra.taskStore.createTask({ ttl: extra.taskRequestedTtl });
      await extra.taskStore.storeTaskResult(task.taskId, "completed", result);
      return { task };
    }
    return result;
  };
  client.setRequestHandler(ElicitRequestSchema, (request, extra) => {
    const props = request.params.requestedSchema?.properties ?? {};
    const content = "interpretation" in props
      ? { interpretation: props.interpretation.oneOf?.[0]?.const ?? "technical" }
      : { name: "Ada", favoriteColor: "Blue", agreeToTerms: true };
    return answer(request, extra, { action: "accept", content });
  });
  client.setRequestHandler(CreateMessageRequestSchema, (request, extra) =>
    answer(request, extra, {
      model: "driver-fixed-model",
      role: "assistant",
      content: { type: "text", text: "a fixed sampled answer" },
    }),
  );
  client.setNotificationHandler(TaskStatusNotificationSchema, (notification) => {
    seen.statusNotifications.push({
      taskId: notification.params.taskId,
      status: notification.params.status,
    });
  });
  return client;
}

async function streamed(client, name, args, requestOptions, onCreated) {
  const outcome = { taskId: null, statuses: [], result: null, error: null };
  const stream = client.experimental.tasks.callToolStream(
    { name, arguments: args },
    CallToolResultSchema,
    { ...requestOptions, task: { ttl: 60000 } },
  );
  for await (const message of stream) {
    if (message.type === "taskCreated") {
      outcome.taskId = message.task.taskId;
      outcome.statuses.push(message.task.status);
      if (onCreated) await onCreated(message.task.taskId);
    } else if (message.type === "taskStatus") {
      if (outcome.statuses.at(-1) !== message.task.status) outcome.statuses.push(message.task.status);
    } else if (message.type === "result") {
      outcome.result = { isError: message.result.isError ?? false, texts: texts(message.result) };
    } else if (message.type === "error") {
      outcome.error = errorOf(message.error);
    }
  }
  return outcome;
}

async function settle(promise) {
  try {
    return { ok: await promise };
  } catch (error) {
    return { error: errorOf(error) };
  }
}

const run = {
  research: (client, o, ro) =>
    streamed(client, `${o.prefix}simulate-research-query`, { topic: "rivers" }, ro),

  input_required: (client, o, ro) =>
    streamed(client, `${o.prefix}simulate-research-query`, { topic: "python", ambiguous: true }, ro),

  polled: async (client, o, ro) => {
    const created = await client.request(
      {
        method: "tools/call",
        params: { name: `${o.prefix}simulate-research-query`, arguments: { topic: "tides" }, task: { ttl: 60000 } },
      },
      CreateTaskResultSchema,
      ro,
    );
    const taskId = created.task.taskId;
    const statuses = [created.task.status];
    const deadline = Date.now() + o.timeoutMs;
    let task = created.task;
    while (!["completed", "failed", "cancelled"].includes(task.status)) {
      if (Date.now() > deadline) throw new Error(`task ${taskId} still ${task.status} at the deadline`);
      await new Promise((resolve) => setTimeout(resolve, Math.min(task.pollInterval ?? 200, 500)));
      task = await client.experimental.tasks.getTask(taskId, ro);
      if (statuses.at(-1) !== task.status) statuses.push(task.status);
    }
    const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, ro);
    const after = await client.experimental.tasks.getTask(taskId, ro);
    const listed = await settle(client.experimental.tasks.listTasks(undefined, ro));
    return {
      taskId,
      ttl: created.task.ttl ?? null,
      statuses,
      result: { isError: result.isError ?? false, texts: texts(result) },
      statusAfter: after.status,
      listed: listed.ok ? listed.ok.tasks.some((t) => t.taskId === taskId) : null,
      listError: listed.error ?? null,
    };
  },

  cancelled: async (client, o, ro) => {
    let cancel = null;
    const outcome = await streamed(client, `${o.prefix}simulate-research-query`, { topic: "dunes" }, ro, async (taskId) => {
      cancel = await settle(client.experimental.tasks.cancelTask(taskId, ro));
    });
    const after = await settle(client.experimental.tasks.getTask(outcome.taskId, ro));
    const result = await settle(client.experimental.tasks.getTaskResult(outcome.taskId, CallToolResultSchema, ro));
    return {
      ...outcome,
      cancelStatus: cancel?.ok?.status ?? null,
      cancelError: cancel?.error ?? null,
      statusAfter: after.ok?.status ?? null,
      resultAfter: result.ok ? { texts: texts(result.ok) } : null,
      resultAfterError: result.error ?? null,
    };
  },

  elicitation_async: async (client, o, ro) => {
    const result = await client.callTool({ name: `${o.prefix}trigger-elicitation-request-async`, arguments: {} }, CallToolResultSchema, ro);
    return { result: { isError: result.isError ?? false, texts: texts(result) } };
  },

  sampling_async: async (client, o, ro) => {
    const result = await client.callTool(
      { name: `${o.prefix}trigger-sampling-request-async`, arguments: { prompt: "say hi", maxTokens: 10 } },
      CallToolResultSchema,
      ro,
    );
    return { result: { isError: result.isError ?? false, texts: texts(result) } };
  },

  unknown_task: async (client, o, ro) => ({
    get: (await settle(client.experimental.tasks.getTask("no-such-task", ro))).error ?? "answered",
    result: (await settle(client.experimental.tasks.getTaskResult("no-such-task", CallToolResultSchema, ro))).error ?? "answered",
    cancel: (await settle(client.experimental.tasks.cancelTask("no-such-task", ro))).error ?? "answered",
  }),
};

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const seen = { requests: [], statusNotifications: [] };
  const client = makeClient(seen);
  let closing = false;
  client.onerror = (error) => closing || process.stderr.write(`tasks_driver: ${error?.message ?? error}\n`);
  const transport = options.url
    ? new StreamableHTTPClientTransport(new URL(options.url))
    : new StdioClientTransport({ command: options.stdio[0], args: options.stdio.slice(1), stderr: "ignore" });
  await client.connect(transport);
  const report = {
    serverTasks: client.getServerCapabilities()?.tasks ?? null,
    tools: {},
    scenarios: {},
  };
  const listed = await client.listTools();
  for (const tool of listed.tools) {
    if (tool.name.startsWith(options.prefix)) report.tools[tool.name.slice(options.prefix.length)] = tool.execution?.taskSupport ?? null;
  }
  const requestOptions = { timeout: options.timeoutMs };
  for (const name of options.only) {
    try {
      report.scenarios[name] = await run[name](client, options, requestOptions);
    } catch (error) {
      report.scenarios[name] = { error: errorOf(error) };
    }
  }
  report.requests = seen.requests;
  report.statusNotifications = seen.statusNotifications;
  closing = true;
  await client.close();
  // The in-memory task store keeps a timer per task until its TTL: exit once the report is out.
  process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0));
}

main().catch((error) => {
  process.stderr.write(`tasks_driver: ${error?.stack ?? error}\n`);
  process.exit(2);
});
