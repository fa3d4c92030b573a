// The npm clients the tests use, with a clear message when they are not installed.
export async function importDep(name) {
  try {
    return await import(name);
  } catch (e) {
    throw new Error(`npm package '${name}' is missing: run \`npm ci --prefix tests/integration --no-audit --no-fund\` ` +
      `(scripts/test does it). Cause: ${e.message}`);
  }
}
