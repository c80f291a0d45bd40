"""`--model`: a Hub id, a local folder holding config.json, a config.json path, or the name of a config shipped under
scenarios/models/, resolved to one local config.json. From the Hub only config.json is downloaded (huggingface_hub),
never weights."""

import re
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.paths import SCENARIOS_DIR

MODELS_DIR = SCENARIOS_DIR / "models"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    """What the model is called in the output: the folder's name, or the Hub id with `/` as `--`."""
    config_file: Path
    """An absolute path to a file named config.json (not resolved: a Hub cache's is a link into its blobs)."""


def resolve_model(text: str) -> ModelConfig:
    """The local config.json `--model text` stands for; one line naming what to give instead when there is none."""
    path = Path(text).expanduser()
    if path.is_file():
        if path.name != "config.json":
            raise BenchError(f"--model {text}: a config file must be named config.json (or give its folder)")
        return ModelConfig(path.absolute().parent.name, path.absolute())
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BenchError(f"--model {text}: the folder holds no config.json")
        return ModelConfig(path.absolute().name, path.absolute() / "config.json")
    shipped = MODELS_DIR / text / "config.json"
    if "/" not in text and shipped.is_file():
        return ModelConfig(text, shipped)
    if HUB_ID.match(text):
        return ModelConfig(text.replace("/", "--"), _hub_config(text))
    known = ", ".join(sorted(p.parent.name for p in MODELS_DIR.glob("*/config.json")))
    raise BenchError(f"--model {text}: not a file, a folder, a Hub id (owner/name) or a shipped model config ({known})")


def _hub_config(repo_id: str) -> Path:
    """config.json of `repo_id` from the Hub (or huggingface_hub's local cache when HF_HUB_OFFLINE is set)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    try:
        return Path(hf_hub_download(repo_id, "config.json")).absolute()
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BenchError(
            f"--model {repo_id}: cannot download its config.json from the Hub ({reason[:160]}); "
            f"pass a local folder holding its config.json instead, e.g. --model path/to/{repo_id.split('/')[-1]}"
        ) from None
