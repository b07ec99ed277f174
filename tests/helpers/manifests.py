"""Real validators for what `distrain export` writes (from the `dev` extra; none needs the network).

- compose: ``check-jsonschema --builtin-schema vendor.compose-spec`` (the Compose Specification's
  JSON schema, vendored in the check-jsonschema package);
- Kubernetes: ``kubernetes-validate --strict`` (the Kubernetes API's JSON schemas, shipped in the
  package) for the PersistentVolumeClaim and each pod template (as a ``v1 PodTemplate``); the
  PyTorchJob itself against the models of the Kubeflow training SDK (``kubeflow-training``),
  generated from the training operator's OpenAPI spec: every key must be a field of the model,
  every value of the field's type;
- Dockerfile: the ``dockerfile`` package, BuildKit's own Go parser.

Where a validator is not installed the caller skips and names the package.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def need(module: str, package: str) -> None:
    """Skip (saying which `dev` package is missing) unless `module` imports."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed (pip install -e '.[dev]')")


def compose_errors(path: Path) -> str | None:
    """None when the compose file validates against the Compose Spec schema, else the report."""
    tool = shutil.which("check-jsonschema")
    if tool is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    res = subprocess.run(
        [tool, "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return None if res.returncode == 0 else (res.stdout + res.stderr).strip()


def _k8s(doc: dict[str, Any]) -> list[str]:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as err:
        return [f"{doc.get('kind')}: {'.'.join(str(p) for p in err.path)}: {err.message}"]
    return []


def _pod_template(template: Any, where: str) -> list[str]:
    wrapped = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "check"},
        "template": template,
    }
    return [f"{where}: {e}" for e in _k8s(wrapped)]


_SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def _model(value: Any, kind: str, where: str) -> list[str]:
    """Errors of `value` against the SDK model (or type expression) `kind`."""
    import kubeflow.training.models as models

    if kind.startswith("list["):
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        return [e for i, v in enumerate(value) for e in _model(v, kind[5:-1], f"{where}[{i}]")]
    if kind.startswith("dict("):
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping"]
        inner = kind[kind.index(",") + 1 : -1].strip()
        return [e for k, v in value.items() for e in _model(v, inner, f"{where}.{k}")]
    if kind in _SCALARS:
        ok = isinstance(value, _SCALARS[kind]) and not (kind == "int" and isinstance(value, bool))
        return [] if ok else [f"{where}: expected {kind}, got {value!r}"]
    if kind == "V1PodTemplateSpec":
        return _pod_template(value, where)
    if kind.startswith("V1"):  # other Kubernetes types here: ObjectMeta (the job's name)
        return [] if isinstance(value, dict) else [f"{where}: expected a mapping"]
    cls = getattr(models, kind)
    if not isinstance(value, dict):
        return [f"{where}: expected a mapping ({kind})"]
    fields = {json_key: cls.openapi_types[attr] for attr, json_key in cls.attribute_map.items()}
    errors = [f"{where}.{key}: no such field in {kind}" for key in value if key not in fields]
    return errors + [
        e
        for key, v in value.items()
        if key in fields
        for e in _model(v, fields[key], f"{where}.{key}")
    ]


def k8s_errors(docs: list[dict[str, Any]]) -> list[str]:
    """Every problem the validators find in the documents of a `distrain export k8s` file."""
    need("kubernetes_validate", "kubernetes-validate")
    need("kubeflow.training", "kubeflow-training")
    errors: list[str] = []
    for doc in docs:
        if doc.get("kind") == "PyTorchJob":
            if doc.get("apiVersion") != "kubeflow.org/v1":
                errors.append(
                    f"PyTorchJob: apiVersion {doc.get('apiVersion')!r}, expected kubeflow.org/v1"
                )
            errors += _model(doc, "KubeflowOrgV1PyTorchJob", "PyTorchJob")
        else:
            errors += _k8s(doc)
    return errors
