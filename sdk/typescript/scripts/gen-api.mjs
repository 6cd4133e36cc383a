// Generates src/api.ts (the API's types) from the repository's openapi.yaml with
// openapi-typescript. `--check` writes nothing and fails when src/api.ts is not what the
// spec generates now: a change of the spec must be regenerated (`npm run gen`) and the SDK
// must still type-check against it.
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";

const spec = new URL("../../../openapi.yaml", import.meta.url);
const target = new URL("../src/api.ts", import.meta.url);
const check = process.argv.includes("--check");

const banner = `// Generated from openapi.yaml by scripts/gen-api.mjs (openapi-typescript); do not edit.
// Regenerate with \`npm run gen\` after changing the spec.

`;

// Defaulted request fields stay optional: a request may leave them out.
const ast = await openapiTS(spec, { defaultNonNullable: false, silent: true });
const generated = banner + astToString(ast);

if (check) {
  let current = "";
  try {
    current = await readFile(target, "utf8");
  } catch {
    // Missing counts as stale.
  }
  if (current !== generated) {
    console.error(
      "sdk/typescript/src/api.ts is not what openapi.yaml generates: the spec changed. Run `npm run gen` in sdk/typescript, make the SDK compile against the new types (`npx tsc -p tsconfig.test.json --noEmit`), and commit both.",
    );
    process.exit(1);
  }
  console.log("sdk/typescript/src/api.ts matches openapi.yaml");
} else {
  await writeFile(target, generated);
  console.log(`wrote ${fileURLToPath(target)}`);
}
