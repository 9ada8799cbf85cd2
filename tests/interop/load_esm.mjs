// Loads the ES module entry point of a package installed in the npm directory that
// tests/test_interop_mcp.py prepared (ACP_INTEROP_NPM_DIR), for the MCP-over-ACP scripts.
//
// Unlike load_sdk.mjs this follows the "import" condition of the package's exports map:
// createRequire's resolution picks the CommonJS build of a dual package such as
// @modelcontextprotocol/server, and a class from that second copy fails the instanceof checks
// of the ACP SDK, which imports the ES module build.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

function pick(target) {
  if (typeof target === "string") {
    return target;
  }
  if (target && typeof target === "object") {
    return pick(target.import) ?? pick(target.default);
  }
  return undefined;
}

export async function loadEsm(specifier) {
  const dir = process.env.ACP_INTEROP_NPM_DIR;
  if (!dir) {
    throw new Error("ACP_INTEROP_NPM_DIR is not set (the npm directory holding the SDKs)");
  }
  const parts = specifier.split("/");
  const nameLength = specifier.startsWith("@") ? 2 : 1;
  const name = parts.slice(0, nameLength).join("/");
  const subpath = parts.length > nameLength ? `./${parts.slice(nameLength).join("/")}` : ".";
  const root = join(dir, "node_modules", name);
  const pkg = JSON.parse(await readFile(join(root, "package.json"), "utf8"));
  const exported = typeof pkg.exports === "object" && "." in pkg.exports ? pkg.exports[subpath] : subpath === "." ? pkg.exports : undefined;
  const file = pick(exported) ?? (subpath === "." ? pkg.module ?? pkg.main : undefined);
  if (!file) {
    throw new Error(`${specifier}: no ES module entry point in ${join(root, "package.json")}`);
  }
  return import(pathToFileURL(join(root, file)).href);
}
