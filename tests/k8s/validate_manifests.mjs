// Validates Kubernetes objects against the API's OpenAPI schemas (npm kubernetes-models,
// fetched by scripts/fetch_k8s_assets.sh), the way an API server's schema check would.
//   node validate_manifests.mjs NODE_MODULES FILE.yaml
// FILE holds one or more YAML documents (kubectl kustomize's output). Every document
// is looked up by apiVersion and kind and checked with the model's validate(); an
// object of a kind this script does not know is an error too. Exits 1 naming the first
// bad object and the schema's complaint; prints one line per valid object otherwise.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [modules, file] = process.argv.slice(2);
if (!modules || !file) {
  console.error("usage: node validate_manifests.mjs NODE_MODULES FILE.yaml");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(modules), "noop.js"));
const yaml = require("js-yaml");

// apiVersion -> the kubernetes-models module that holds its kinds.
const modulesByApiVersion = {
  v1: "v1",
  "batch/v1": "batch/v1",
  "apps/v1": "apps/v1",
  "networking.k8s.io/v1": "networking.k8s.io/v1",
  "rbac.authorization.k8s.io/v1": "rbac.authorization.k8s.io/v1",
};

const documents = yaml.loadAll(readFileSync(file, "utf8")).filter((d) => d !== null && d !== undefined);
if (documents.length === 0) {
  console.error(`${file}: no objects`);
  process.exit(1);
}
let failed = false;
for (const [i, object] of documents.entries()) {
  const name = `${object?.kind ?? "?"}/${object?.metadata?.name ?? "?"} (document ${i + 1})`;
  const subpath = modulesByApiVersion[object?.apiVersion];
  let model;
  if (subpath) model = require(`kubernetes-models/${subpath}`)[object.kind];
  if (!model) {
    console.error(`${name}: unknown apiVersion/kind ${object?.apiVersion}/${object?.kind}`);
    failed = true;
    continue;
  }
  try {
    new model(object).validate();
    console.log(`valid: ${name}`);
  } catch (error) {
    const details = error.errors ? JSON.stringify(error.errors, null, 1) : "";
    console.error(`invalid: ${name}: ${error.message}${details ? "\n" + details : ""}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
