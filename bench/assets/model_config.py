"""`--model`: a Hub id, a local folder holding config.json, a config.json path, or the name of a config shipped under
scenarios/models/, resolved to one local config.json. From the Hub only config.json is downloaded (huggingface_hub),
never weights."""

import re
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.paths import SCENARIOS_DIR, scenarios_dir

MODELS_DIR = SCENARIOS_DIR / "models"
"""The shipped model configs."""
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    """What the model is called in the output: the folder's name, or the Hub id with `/` as `--`."""
    config_file: Path
    """An absolute path to a file named config.json (not resolved: a Hub cache's is a link into its blobs)."""


SHIPPED_ROW = re.compile(r"^\| `(?P<folder>[^`]+)` \| (?P<source>https://\S+) \| (?P<billions>[\d.]+) B \|$", re.M)
"""A row of scenarios/models/README.md's table: the folder, the Hub page its config.json was written from, and the
parameter count its publisher states."""
HUB_PAGE = "https://huggingface.co/"
PROBE_TIMEOUT_S = 1.5
"""How long the Hub's host may take to answer a connection before `--model owner/name` says it cannot be reached."""


@dataclass(frozen=True)
class ShippedModel:
    folder: str
    hub_id: str | None
    """`owner/name` when the source is a Hub page."""
    billions: str
    """The published parameter count, as the README writes it."""


def models_dir() -> Path:
    """The model configs of the scenario folder in use."""
    return scenarios_dir() / "models"


def shipped_models() -> list[ShippedModel]:
    """The configs shipped under scenarios/models/, as its README's table lists them."""
    rows = SHIPPED_ROW.finditer((models_dir() / "README.md").read_text(encoding="utf-8"))
    return [
        ShippedModel(
            m["folder"], m["source"].removeprefix(HUB_PAGE) if m["source"].startswith(HUB_PAGE) else None, m["billions"]
        )
        for m in rows
    ]


def resolve_model(text: str) -> ModelConfig:
    """The local config.json `--model text` stands for; one line naming what to give instead when there is none.
    A Hub id whose config is shipped (scenarios/models/README.md) is the shipped config: no network needed."""
    path = Path(text).expanduser()
    if path.is_file():
        if path.name != "config.json":
            raise BenchError(f"--model {text}: a config file must be named config.json (or give its folder)")
        return ModelConfig(path.absolute().parent.name, path.absolute())
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BenchError(f"--model {text}: the folder holds no config.json")
        return ModelConfig(path.absolute().name, path.absolute() / "config.json")
    shipped = models_dir() / text / "config.json"
    if "/" not in text and shipped.is_file():
        return ModelConfig(text, shipped)
    if HUB_ID.match(text):
        known = next((m for m in shipped_models() if m.hub_id and m.hub_id.lower() == text.lower()), None)
        if known is not None:
            return ModelConfig(known.folder, models_dir() / known.folder / "config.json")
        return ModelConfig(text.replace("/", "--"), _hub_config(text))
    known = ", ".join(sorted(p.parent.name for p in models_dir().glob("*/config.json")))
    raise BenchError(f"--model {text}: not a file, a folder, a Hub id (owner/name) or a shipped model config ({known})")


def _hub_config(repo_id: str) -> Path:
    """config.json of `repo_id`: from huggingface_hub's local cache, else from the Hub. Without a connection to the
    Hub this fails within PROBE_TIMEOUT_S, not after huggingface_hub's retries."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    def cannot(reason: str) -> BenchError:
        return BenchError(
            f"--model {repo_id}: cannot download its config.json from the Hub ({reason}); pass a local folder "
            f"holding its config.json instead, e.g. --model path/to/{repo_id.split('/')[-1]}"
        )

    try:
        return Path(hf_hub_download(repo_id, "config.json", local_files_only=True)).absolute()
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, OSError):
        pass
    if constants.HF_HUB_OFFLINE:
        raise cannot("HF_HUB_OFFLINE is set and huggingface_hub's cache does not hold it")
    if (unreachable := _unreachable(constants.ENDPOINT)) is not None:
        raise cannot(unreachable)
    try:
        return Path(hf_hub_download(repo_id, "config.json", etag_timeout=PROBE_TIMEOUT_S * 4)).absolute()
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError, OSError) as exc:
        lines = str(exc).strip().splitlines()
        raise cannot(lines[0] if lines else type(exc).__name__) from None


def _unreachable(endpoint: str) -> str | None:
    """Why the Hub's host takes no connection within PROBE_TIMEOUT_S (name lookup included); None when it does, or
    when a proxy is set (the proxy decides)."""
    import os
    import socket
    import threading
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urlsplit(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(f"{host}:{port} unreachable: {exc.strerror or exc}")

    thread = threading.Thread(target=probe, daemon=True)  # a name lookup ignores socket timeouts
    thread.start()
    thread.join(PROBE_TIMEOUT_S + 0.5)
    return outcome[0] if outcome else f"{host}:{port} did not answer within {PROBE_TIMEOUT_S} s"
