"""scaletrain from Python: the planner and run directories.

The planner calls run the C++ code of ``scaletrain plan ... --json`` and return
what that command prints, parsed: the same JSON schema (docs/planner.md, "JSON"),
the same defaults, the same checks, and its error message as a ValueError (a
misspelt model, cluster or stack names the nearest one). Their keywords are the
command's flags with ``_`` for ``-``: ``micro_batch=2`` is ``--micro-batch 2``,
``sp=True`` is ``--sp``, a list repeats a flag (``hardware=["a.toml", "b.toml"]``),
and None leaves a flag out. The catalogs are the ones the package was built with
(``config_dir=`` reads another folder).

    >>> import scaletrain
    >>> p = scaletrain.plan("llama2-70b", "dgx-h100", 1024, tp=8, pp=4, micro_batch=1)
    >>> p["step_time_s"], p["mfu"], p["memory_per_gpu_gib"]

docs/python.md has a longer example.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, TypedDict, Union

from . import _core
from .runs import PathLike, Run, read_run

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "PlanFlags", "Run", "clusters", "gpus", "models", "plan", "read_run", "search", "stacks",
    "sweep", "validate",
]

__version__: str = _core.__version__
"""The project's release (the repository's VERSION file)."""

build_version: str = _core.build_version()
"""``git describe`` of the source built, as ``scaletrain --version`` prints it."""

_PACKAGED_CONFIGS = str(Path(__file__).with_name("configs"))



class PlanFlags(TypedDict, total=False):
    """The keywords of plan(), search() and sweep(): ``scaletrain plan``'s flags.

    Each means what the flag means (``scaletrain plan --help``, docs/planner.md);
    a keyword left out (or None) takes the command's default. Two of the
    command's flags are functions here: ``--search`` is search(), ``--sweep``
    sweep() (plan() takes ``search=True`` or ``sweep=[...]`` too, and then
    returns the whole search or sweep document).
    """

    train_config: str  # plan the run a `scaletrain train` config describes
    set: List[str]  # with train_config: "section.key=value" overrides
    vocab: int  # with train_config: the vocabulary size when the config has none
    stack: str  # software stack: modern, legacy, pytorch, ... or an alias
    stack_file: List[str]  # stack files of your own
    hardware: List[str]  # extra hardware TOML files (e.g. a `scaletrain bench` profile)
    config_dir: str  # a folder with hardware/, models/ and stacks/ (default: the package's)
    tp: int
    pp: int
    dp: int
    cp: int
    cp_impl: str  # ring, ulysses
    search_cp: bool  # with search(): also try every cp that divides the GPUs and the sequence
    vpp: int
    micro_batch: int
    global_batch: int
    seq: int
    zero: int
    shard_group: int
    recompute: str  # none, selective, full, op
    recompute_layers: int
    sp: bool
    precision: str  # bf16, fp16, fp8, tf32, fp32
    grad_reduce: str  # auto, fp32, compute
    schedule: str  # gpipe, 1f1b, interleaved, zb-h1, zb-v
    bucket_mb: float
    dp_reduce: str  # flat, hierarchical
    dp_compress: str  # none, bf16, fp16, sign
    power_cap: float  # W
    hbm_gib: float
    hbm_tbps: float
    kernel_uncertainty: float
    fabric_uncertainty: float
    tokens: float
    rack_kw: float
    usd_per_gpu_hour: float
    pue: float
    utilization: float
    mtbf_hours: float  # MTBF of one node (or GPU, mtbf_per="gpu"): adds the "goodput" object
    mtbf_per: str  # node, gpu
    goodput: bool  # the goodput with the cluster preset's MTBF
    storage_gbps: float  # GB/s the job writes a checkpoint at
    storage_read_gbps: float
    restart_s: float  # relaunch after a failure, the checkpoint read aside
    checkpoint_interval_steps: int  # evaluate this interval instead of Daly's optimum
    top: int  # layouts search() returns
    plot: str  # with sweep(): an SVG plot written to this file


def _word(value: Any) -> str:
    """A value as the command line writes it (repr: a float's shortest exact form)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _flag_args(function: str, flags: Dict[str, Any], validate: bool) -> List[str]:
    """Keywords to the flags of ``scaletrain plan`` (or ``plan validate``).

    A keyword that is no flag is a TypeError naming the nearest one. The
    package's catalogs are the default config folder.
    """
    known = [f.replace("-", "_") for f in _core.plan_flags(validate)]
    args: List[str] = []
    for key, value in flags.items():
        if key not in known:
            raise TypeError(
                f"scaletrain.{function}() got an unexpected keyword '{key}'"
                f"{_core.did_you_mean(key, known) or '.'} Its keywords are the flags of "
                f"`scaletrain plan{' validate' if validate else ''} --help`, with _ for -: "
                + ", ".join(known))
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            args += [flag, _word(v)]
    if flags.get("config_dir") is None:
        args += ["--config-dir", _PACKAGED_CONFIGS]
    return args


def _plan_json(function: str, model: Optional[str], cluster: Optional[str], gpus: Optional[int],
               flags: Dict[str, Any]) -> Dict[str, Any]:
    flags = {"model": model, "cluster": cluster, "gpus": gpus, **flags}
    return json.loads(_core.run_plan(_flag_args(function, flags, validate=False) + ["--json"]))


def plan(model: Optional[str] = None, cluster: Optional[str] = None, gpus: Optional[int] = None,
         **flags: Unpack[PlanFlags]) -> Dict[str, Any]:
    """The prediction for one layout: what ``scaletrain plan --json`` prints.

    Args:
        model: a preset (models()) or a model TOML file; or give ``train_config=``.
        cluster: a cluster preset (clusters()).
        gpus: the number of GPUs.
        **flags: the layout and the rest (PlanFlags): ``tp=8, pp=4, micro_batch=1,
            recompute="selective", stack="pytorch"``, ...; unstated ones default as
            the command's do (tp = pp = 1, dp = gpus / (tp x pp), ZeRO 0, bf16, ...).

    Returns:
        The ``scaletrain.plan/1`` document: ``step_time_s``, ``mfu``,
        ``memory_per_gpu_gib``, ``fits``, ``time_breakdown_s``, ``layout``, ...

    Raises:
        ValueError: the command's error (an unknown name, a layout that does not
            divide the model, ...), naming the cause and the fix.
        TypeError: a keyword that is none of the command's flags.
    """
    return _plan_json("plan", model, cluster, gpus, dict(flags))


def search(model: Optional[str] = None, cluster: Optional[str] = None, gpus: Optional[int] = None,
           **flags: Unpack[PlanFlags]) -> List[Dict[str, Any]]:
    """The fastest layouts that fit, fastest first: ``scaletrain plan --search``'s ``top``.

    The flags given (``tp=8``, ``zero=1``, ...) are held, the rest searched;
    ``top=`` says how many to return (default 5). Each element is a plan()
    document. ``plan(..., search=True)`` returns the whole search document
    (with ``families``: why each tp x pp x dp family fits or not).
    """
    return _plan_json("search", model, cluster, gpus, {**flags, "search": True})["top"]


def sweep(model: Optional[str] = None, cluster: Optional[str] = None,
          gpus: Iterable[int] = (), **flags: Unpack[PlanFlags]) -> List[Dict[str, Any]]:
    """The best layout at each GPU count: ``scaletrain plan --sweep``'s ``points``.

    Each point is ``{gpus, found, speedup, efficiency, note, plan}``, ``plan``
    the plan() document of the best layout there (absent where none fits).
    """
    counts = ",".join(str(int(n)) for n in gpus)
    return _plan_json("sweep", model, cluster, None, {**flags, "sweep": counts})["points"]


def validate(table: Union[PathLike, Any], *, stack: Optional[str] = None,
             config_dir: Optional[str] = None, hardware: Optional[List[str]] = None,
             stack_file: Optional[List[str]] = None) -> Dict[str, Any]:
    """The planner against published runs: what ``scaletrain plan validate --json`` prints.

    Args:
        table: a CSV file of runs (the columns of tests/plan/published-runs.csv),
            or a pandas DataFrame with those columns (written to a CSV that the
            command's reader then reads).
        stack: the stack of rows without a ``stack`` value (default modern).

    Returns:
        The ``scaletrain.plan.validate/1`` document: ``rows`` (each predicted, or
        its error), ``mape``, ``max_abs_error_pct``, ``ignored_columns``.
    """
    flags = {"stack": stack, "config_dir": config_dir, "hardware": hardware, "stack_file": stack_file}
    if hasattr(table, "to_csv"):
        with tempfile.TemporaryDirectory(prefix="scaletrain-validate-") as tmp:
            path = os.path.join(tmp, "runs.csv")
            table.to_csv(path, index=False)  # the index is no column of a runs table
            return _validate_file(path, flags)
    return _validate_file(os.fspath(table), flags)


def _validate_file(path: str, flags: Dict[str, Any]) -> Dict[str, Any]:
    args = ["validate", path] + _flag_args("validate", flags, validate=True) + ["--json"]
    return json.loads(_core.run_plan(args))


def _catalog(kind: str, config_dir: Optional[str]) -> List[str]:
    return list(_core.catalogs(config_dir or _PACKAGED_CONFIGS)[kind])


def models(config_dir: Optional[str] = None) -> List[str]:
    """The model presets ``model=`` takes (configs/models)."""
    return _catalog("models", config_dir)


def clusters(config_dir: Optional[str] = None) -> List[str]:
    """The cluster presets ``cluster=`` takes (configs/hardware/clusters.toml)."""
    return _catalog("clusters", config_dir)


def gpus(config_dir: Optional[str] = None) -> List[str]:
    """The GPUs of the hardware catalog (configs/hardware/gpus.toml)."""
    return _catalog("gpus", config_dir)


def stacks(config_dir: Optional[str] = None) -> List[str]:
    """The software stacks ``stack=`` takes by name (configs/stacks; aliases work too)."""
    return _catalog("stacks", config_dir)
