// Bundles chat.jsx (React, react-dom, the sdk's useStream) into OUT/chat.js with an OUT/index.html, offline:
// node build.mjs OUT
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { build } from "esbuild";

const out = process.argv[2];
await build({
  entryPoints: [new URL("./chat.jsx", import.meta.url).pathname],
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "chrome120",
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  outfile: join(out, "chat.js"),
  logLevel: "warning",
});
await writeFile(
  join(out, "index.html"),
  '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Approval chat</title></head>' +
    '<body><div id="root"></div><script type="module" src="chat.js"></script></body></html>\n',
);
