"""Regenerate the vendored Kubernetes JSON schemas that deploy/validate.sh gives kubeconform.

kubeconform fetches its schemas from the internet by default; hookstream's CI has no such access,
so the schemas of the kinds the Helm chart renders are generated once from a Kubernetes OpenAPI
(swagger 2.0) document and committed under deploy/schemas/kubernetes/.

The source document is the Kubernetes v1.27.0 OpenAPI definition that the Go module
``k8s.io/kube-openapi`` carries as test data (``pkg/schemaconv/testdata/swagger.json``). That
module is a dependency of Helm, so `go install helm.sh/helm/v3/cmd/helm` (which validate.sh runs)
puts it in the Go module cache. To regenerate:

    python3 deploy/schemas/generate_kubernetes.py \\
        "$(go env GOMODCACHE)"/k8s.io/kube-openapi@*/pkg/schemaconv/testdata/swagger.json

What the conversion does, and nothing more:

- every ``$ref`` is inlined, so each file stands alone (kubeconform loads one file per kind);
- objects that list ``properties`` get ``additionalProperties: false`` (kubeconform's -strict
  mode relies on this: a misspelt field is an error, not silently dropped by the API server);
- IntOrString becomes "integer or string", Quantity "number or string" (YAML ``cpu: 1`` is valid);
- ``apiVersion`` and ``kind`` are pinned to the generated kind;
- descriptions, ``format`` and the ``x-kubernetes-*`` annotations are dropped (kubeconform does not
  assert formats; the annotations drive server-side merging, not validation).

``required``, ``enum``, ``type``, ``items`` and map value types are kept as Kubernetes states them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: (group, version, kind) of every object the chart can render, with the file name kubeconform
#: derives for it: ``{kind lowercased}-{first label of the group}-{version}.json``.
KINDS: tuple[tuple[str, str, str], ...] = (
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("", "v1", "Service"),
    ("apps", "v1", "StatefulSet"),
    ("batch", "v1", "Job"),
    ("policy", "v1", "PodDisruptionBudget"),
    ("autoscaling", "v2", "HorizontalPodAutoscaler"),
)

INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
KEPT = ("type", "required", "enum", "items", "properties", "additionalProperties")


def file_name(group: str, version: str, kind: str) -> str:
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def _find(definitions: dict[str, Any], group: str, version: str, kind: str) -> str:
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if (gvk["group"], gvk["version"], gvk["kind"]) == (group, version, kind):
                return name
    raise SystemExit(f"{group or 'core'}/{version} {kind}: not in this OpenAPI document")


class Converter:
    def __init__(self, definitions: dict[str, Any]) -> None:
        self.definitions = definitions

    def schema(self, node: dict[str, Any], trail: tuple[str, ...] = ()) -> dict[str, Any]:
        ref = node.get("$ref")
        if ref is not None:
            name = ref.removeprefix("#/definitions/")
            if name == INT_OR_STRING:
                return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
            if name == QUANTITY:
                return {"oneOf": [{"type": "string"}, {"type": "number"}]}
            if name in trail:
                raise SystemExit(f"recursive definition {name}: cannot inline it")
            return self.schema(self.definitions[name], (*trail, name))
        out: dict[str, Any] = {key: node[key] for key in KEPT if key in node}
        if "items" in out:
            out["items"] = self.schema(out["items"], trail)
        if isinstance(out.get("additionalProperties"), dict):
            out["additionalProperties"] = self.schema(out["additionalProperties"], trail)
        if "properties" in out:
            out["properties"] = {
                key: self.schema(value, trail) for key, value in out["properties"].items()
            }
            out.setdefault("additionalProperties", False)
        return out

    def kind(self, group: str, version: str, kind: str) -> dict[str, Any]:
        name = _find(self.definitions, group, version, kind)
        out = self.schema(self.definitions[name], (name,))
        api_version = f"{group}/{version}" if group else version
        out["properties"]["apiVersion"] = {"type": "string", "enum": [api_version]}
        out["properties"]["kind"] = {"type": "string", "enum": [kind]}
        out["required"] = sorted({*out.get("required", []), "apiVersion", "kind"})
        return {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": f"{kind} ({api_version}), Kubernetes v1.27.0, strict",
            **out,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("swagger", type=Path, help="Kubernetes OpenAPI v2 (swagger.json)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "kubernetes", help="output dir"
    )
    args = parser.parse_args()
    document = json.loads(args.swagger.read_text())
    if document.get("info", {}).get("version") != "v1.27.0":
        raise SystemExit(f"{args.swagger}: expected the Kubernetes v1.27.0 document")
    converter = Converter(document["definitions"])
    args.out.mkdir(parents=True, exist_ok=True)
    for group, version, kind in KINDS:
        path = args.out / file_name(group, version, kind)
        schema = converter.kind(group, version, kind)
        path.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
