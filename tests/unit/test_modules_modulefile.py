"""Modulefiles: golden files for the seed's tree and the repo's modules/, Lmod's own
syntax check over them, Lua quoting that no input can break, and .modulerc.lua."""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
import pytest
from lmod_node import check_syntax, readable_copy

from slurmforge.lmod.catalog import Catalog, load_bundle, load_catalog
from slurmforge.lmod.definition import ModuleName, has_prefix
from slurmforge.lmod.modulefile import environment, lua, lua_long, render_modulefile, render_modulerc
from slurmforge.lmod.tree import Tree
from tests.judge import Judge

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "modules"
TREE = Tree("/opt/software/modules")  # the spec's default modules.root
CATALOGS = {
    "seed-002": lambda: load_bundle(Path(__file__).parent / "modules_specs" / "valid-seed-002.yaml"),
    "repo": lambda: load_catalog(ROOT / "modules"),
}
CASES = [(group, full) for group, load in CATALOGS.items() for full in load().names()]


def rendered(catalog: Catalog, full: str) -> str:
    mn, d = ModuleName.parse(full), catalog.get(full)
    return render_modulefile(mn, d, TREE.prefix(mn) if has_prefix(d) else None, deprecated=d.deprecated)


@pytest.mark.parametrize(("group", "full"), CASES, ids=[f"{g}:{f}" for g, f in CASES])
def test_golden(group: str, full: str) -> None:
    text = rendered(CATALOGS[group](), full)
    golden = GOLDEN / group / f"{full}.lua"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"{group}/{full}.lua differs from its golden file"


@pytest.mark.parametrize("group", list(CATALOGS))
def test_lmod_accepts_every_golden_modulefile(judge: Judge, tmp_path: Path, group: str) -> None:
    done = check_syntax(judge, readable_copy(GOLDEN / group, tmp_path / group))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No errors found" in done.stdout


def test_lmod_syntax_check_does_fail(judge: Judge, tmp_path: Path) -> None:
    """The same copy with one broken modulefile added: Lmod reads what the copy holds,
    and names the broken one alone."""
    tree = readable_copy(GOLDEN / "repo", tmp_path / "repo")
    (tmp_path / "bad/apps/bad").mkdir(parents=True)
    (tmp_path / "bad/apps/bad/1.0.lua").write_text('prepend_path("PATH", \n')
    readable_copy(tmp_path / "bad/apps/bad", tree / "apps/bad")
    done = check_syntax(judge, tree)
    assert done.returncode != 0 and "apps/bad/1.0" in done.stderr
    assert "ModuleName: apps/bad/1.0," in done.stderr and done.stderr.count("ModuleName:") == 1


def test_seed_modulefiles_say_what_seed_002_needs() -> None:
    catalog = CATALOGS["seed-002"]()
    torch = rendered(catalog, "libs/python/torch/1.13.1-cuda-11.7-python-3.10")
    assert 'depends_on("apps/python/3.10")\ndepends_on("apps/cuda/11.7")\n' in torch
    assert 'prepend_path("PYTHONPATH", pathJoin(root, "lib/python3.10/site-packages"))' in torch
    cuda = rendered(catalog, "apps/cuda/11.7")
    assert 'setenv("CUDA_HOME", "/opt/software/modules/install/apps/cuda/11.7")' in cuda
    assert 'whatis("Description: CUDA 11.7 toolkit (nvcc, runtime \\"libcudart\\")")' in cuda
    assert "help([==[\n" in cuda  # the help text holds ]] and ]=]
    python = rendered(catalog, "apps/python/3.10")
    assert 'family("python")' in python and "LmodMessage" not in python
    tools = rendered(catalog, "apps/tools/1.0")
    assert 'append_path("MANPATH", pathJoin(root, "share/man"))\nappend_path("MANPATH", "/usr/share/man")' in tools
    assert 'if (mode() == "load") then\n    LmodMessage("apps/tools/1.0 is deprecated' in tools
    meta = rendered(catalog, "apps/ml-base/2024.06")
    assert "local root" not in meta and 'setenv("MPLBACKEND", "Agg")' in meta


def test_lua_strings_cannot_be_broken() -> None:
    assert lua('a "b" \\ c\nd\x01') == '"a \\"b\\" \\\\ c\\nd\\001"'
    assert lua_long("plain") == "[[\nplain\n]]"
    assert lua_long("has ]] and ]=]") == "[==[\nhas ]] and ]=]\n]==]"


def test_modulerc_sets_default_and_hides_deprecated() -> None:
    assert render_modulerc("apps/python", "3.13", ["3.10", "3.11"]).splitlines()[1:] == [
        'module_version("apps/python/3.13", "default")',
        'hide_version("apps/python/3.10")',
        'hide_version("apps/python/3.11")',
    ]
    assert render_modulerc("apps/python", None, []).count("\n") == 1


def test_template_is_strict() -> None:
    with pytest.raises(jinja2.UndefinedError):
        environment().get_template("modulefile.lua.j2").render(full="x")


def test_goldens_have_no_strays() -> None:
    expected = {GOLDEN / g / f"{f}.lua" for g, f in CASES}
    assert set(GOLDEN.rglob("*.lua")) == expected, "remove golden files no test renders"
