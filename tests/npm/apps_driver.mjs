// What an MCP Apps host built on the TypeScript SDK sees: prints one JSON report on stdout.
//
//   node apps_driver.mjs --url URL [--bearer KEY] [--read URI]...
//
// The client declares the MCP Apps extension (io.modelcontextprotocol/ui, text/html;profile=mcp-app)
// and reports the server's extensions, every tool's _meta, every listed resource's URI, and for
// each --read URI either {uri, mimeType, text} of its first content or the error it got.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const UI = "io.modelcontextprotocol/ui";

function parseArgs(argv) {
  const options = { reads: [] };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--url") options.url = value;
    else if (flag === "--bearer") options.bearer = value;
    else if (flag === "--read") options.reads.push(value);
    else throw new Error(`unknown option ${flag}`);
  }
  if (!options.url) throw new Error("--url is required");
  return options;
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const client = new Client(
    { name: "manifold-apps-driver", version: "1.0.0" },
    { capabilities: { extensions: { [UI]: { mimeTypes: ["text/html;profile=mcp-app"] } } } },
  );
  const headers = options.bearer ? { Authorization: `Bearer ${options.bearer}` } : {};
  await client.connect(new StreamableHTTPClientTransport(new URL(options.url), { requestInit: { headers } }));
  const report = { extensions: client.getServerCapabilities()?.extensions ?? null, tools: {}, resources: [], reads: {} };
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : undefined);
    for (const tool of page.tools) report.tools[tool.name] = tool._meta ?? null;
    cursor = page.nextCursor;
  } while (cursor);
  do {
    const page = await client.listResources(cursor ? { cursor } : undefined);
    for (const resource of page.resources) report.resources.push(resource.uri);
    cursor = page.nextCursor;
  } while (cursor);
  for (const uri of options.reads) {
    try {
      const [first] = (await client.readResource({ uri })).contents;
      report.reads[uri] = { uri: first.uri, mimeType: first.mimeType ?? null, text: first.text ?? null };
    } catch (error) {
      report.reads[uri] = { error: { code: error?.code ?? null, message: String(error?.message ?? error) } };
    }
  }
  await client.close();
  process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0));
}

main().catch((error) => {
  process.stderr.write(`apps_driver: ${error?.stack ?? error}\n`);
  process.exit(2);
});
