"""The one configuration of gpuwait's rules and dashboards (mixin/config.yml), and what the
generators share: loading it with a site's overrides, placeholders for the Helm chart, the
verdict vocabulary and the method's claims.

alerts/generate.py renders the rule files and dashboards/generate.py the dashboards from a
loaded configuration. Both can also render with ``placeholders(config)`` in place of the
values: every setting then appears as ``<<section.key>>`` in the output, and the Helm chart
substitutes its ``mixin:`` values there (deploy/helm/gpuwait/templates/_mixin.tpl), so the
chart and the committed files come from the same rules and dashboards.
"""

from __future__ import annotations

import copy
import importlib.util
import pathlib
import re
import sys
from typing import Any

import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
CONFIG = HERE / "config.yml"

# The verdict vocabulary comes from the exporter itself.
if str(REPO / "exporter") not in sys.path:
    sys.path.insert(0, str(REPO / "exporter"))
from gpuwait.analysis.attribution import CAUSES  # noqa: E402

#: The method's claims (docs/method.md), by id.
CLAIMS = {
    "A1": "impact first: low utilization without demand or impact needs no fix",
    "A2": "the CPU side feeds the GPU",
    "A3": "a busy CPU is not proof of a CPU bottleneck",
    "A4": "the work may be too small",
    "A5": "memory capacity is not memory bandwidth",
    "A6": "a data-reading bottleneck is not necessarily a slow disk",
    "A7": "sequential throughput and many small files are different regimes",
    "A8": "compare data-preparation time with compute time",
    "A9": "interconnect, PCIe and network inside and across servers",
    "A10": "do not blame the network without the pattern",
    "A11": "InfiniBand and RoCE are different fabrics",
    "A12": "a slow peer makes the others wait at the barrier",
    "A13": "training and inference differ",
    "A14": "the order of the search",
}
CLAIM_ID = re.compile(r"\bA(?:1[0-4]|[1-9])\b")
PLACEHOLDER = re.compile(r"<<([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)>>")
#: Label names as Prometheus accepts them.
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def load_module(name: str, path: pathlib.Path):
    """A generator script (alerts/generate.py, dashboards/generate.py, deploy/*/generate.py) as
    a module; the generators are scripts, not a package, and use one another this way."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


class ConfigError(Exception):
    """A configuration file that cannot be used; the message names the file and the key."""


def merge(base: dict, override: dict, where: str, path: str = "") -> dict:
    """``override`` on top of ``base``: every key must exist in ``base`` with the same shape."""
    out = copy.deepcopy(base)
    if not isinstance(override, dict):
        raise ConfigError(f"{where}: {path.rstrip('.') or 'the file'} must be a mapping")
    for key, value in override.items():
        if key not in out:
            raise ConfigError(f"{where}: unknown setting {path}{key}")
        if isinstance(out[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {path}{key} is a section, not a value")
            out[key] = merge(out[key], value, where, f"{path}{key}.")
        elif isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: {path}{key} must be a single value")
        elif isinstance(out[key], (int, float)) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{where}: {path}{key} must be a number, not {value!r}")
        elif isinstance(out[key], str) and not isinstance(value, str):
            raise ConfigError(f"{where}: {path}{key} must be a string, not {value!r}")
        else:
            out[key] = value
    return out


def _read(path: pathlib.Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None


def load(override: pathlib.Path | None = None) -> dict:
    """mixin/config.yml, with a site's file of overrides on top."""
    config = _read(CONFIG)
    if override is not None:
        config = merge(config, _read(override) or {}, str(override))
    check(config, str(override or CONFIG))
    return config


def check(config: dict, where: str) -> None:
    cluster = config["labels"]["cluster"]
    if not LABEL_NAME.fullmatch(str(cluster)):
        raise ConfigError(f"{where}: labels.cluster must be a label name, not {cluster!r}")


def leaves(config: dict, prefix: str = "") -> dict[str, Any]:
    """{"wait.min_ratio": 0.2, "runbook_url_base": "...", ...}: every setting by its path."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def placeholders(config: dict, prefix: str = "") -> dict:
    """The configuration with every value replaced by its ``<<path>>`` placeholder."""
    return {key: placeholders(value, f"{prefix}{key}.") if isinstance(value, dict) else f"<<{prefix}{key}>>"
            for key, value in config.items()}


def value_text(value: Any) -> str:
    """A setting as it appears in PromQL, YAML and JSON text (integers without a decimal point,
    as the chart's template prints them too)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def substitute(text: str, config: dict) -> str:
    """Every ``<<path>>`` in ``text`` replaced by its setting."""
    flat = leaves(config)

    def lookup(match: re.Match) -> str:
        if match.group(1) not in flat:
            raise ConfigError(f"no setting {match.group(1)} for <<{match.group(1)}>>")
        return value_text(flat[match.group(1)])

    return PLACEHOLDER.sub(lookup, text)
