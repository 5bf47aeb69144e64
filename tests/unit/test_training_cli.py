"""`graystack weights train|derive` and `graystack eval`: one directory of checkpoints, each in the
status its name says, and a quality JSON that names the command that produced it."""

import json

import pytest
from click.testing import CliRunner

from graystack.cli import main
from inference.checkpoint import load_model


def run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    directory = tmp_path_factory.mktemp("weights")
    sizes = (
        "--steps",
        "3",
        "--fine-tune-steps",
        "2",
        "--batch",
        "2",
        "--length",
        "32",
        "--train-bytes",
        "50000",
    )
    return directory, run("weights", "train", "--out-dir", str(directory), *sizes).output


def test_train_writes_the_baseline_and_the_three_zero_layer_forms_each_in_its_status(trained):
    directory, output = trained
    for name, status in (
        ("baseline", "ACTIVE"),
        ("zero-layer", "ACTIVE"),
        ("zero-layer-zeroed", "ZEROED"),
        ("zero-layer-erased", "ERASED"),
    ):
        path = directory / f"{name}.safetensors"
        assert f"{path}: {status}" in output
        assert json.loads(run("weights", "check", str(path), "--json").output)["status"] == status
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["train"]["result"]["steps"] == 3
    assert manifest["derive"]["effective_window"] > 0


def test_derive_again_from_the_same_baseline_rewrites_the_forms(trained):
    directory, _ = trained
    before = (directory / "zero-layer.safetensors").read_bytes()
    output = run("weights", "derive", "--out-dir", str(directory), "--steps", "0").output
    assert "effective window" in output
    assert (directory / "zero-layer.safetensors").read_bytes() != before  # no fine-tune this time


def test_eval_reports_every_form_and_writes_json_with_the_command(trained, tmp_path):
    directory, _ = trained
    out = tmp_path / "quality.json"
    args = ("eval", "--weights-dir", str(directory), "--contexts", "16,32", "--scored-bytes", "64")
    output = run(*args, "--out", str(out)).output
    body = json.loads(out.read_text())
    assert body["command"].startswith(f"graystack eval --weights-dir {directory} --contexts 16,32")
    names = [result["name"] for result in body["results"]]
    assert names == ["baseline", "zero-layer", "zero-layer-zeroed", "zero-layer-erased"]
    baseline = body["results"][0]
    assert baseline["agreement"] == {"16": 1.0, "32": 1.0}
    assert all(0 < bits < 16 for result in body["results"] for bits in result["bits_per_byte"].values())
    assert body["results"][2]["effective_window"] == body["results"][3]["effective_window"] == 0
    assert "zero-layer-erased" in output


def test_the_derived_forms_keep_the_baselines_backbone_so_the_fingerprint_hash_matches(trained):
    directory, _ = trained
    baseline = load_model(directory / "baseline.safetensors", "baseline").fingerprint
    for name in ("zero-layer", "zero-layer-zeroed", "zero-layer-erased"):
        assert (
            load_model(directory / f"{name}.safetensors", "zero-layer").fingerprint
            == f"{baseline}-zero-layer-v1"
        )
