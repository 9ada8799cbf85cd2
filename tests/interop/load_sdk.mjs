// Loads @agentclientprotocol/sdk from the npm directory that tests/test_interop.py installed.
//
// ESM ignores NODE_PATH, so the scripts here cannot import the package by name from the
// repository; the test passes the install directory in ACP_INTEROP_NPM_DIR and Node's own
// resolution (require.resolve honours the package's "exports" map) finds the entry point there.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

export async function loadSdk() {
  const dir = process.env.ACP_INTEROP_NPM_DIR;
  if (!dir) {
    throw new Error("ACP_INTEROP_NPM_DIR is not set (the npm directory holding @agentclientprotocol/sdk)");
  }
  const require = createRequire(join(dir, "package.json"));
  return import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);
}
