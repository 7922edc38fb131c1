"""The tbprobe distribution: collector, graph builder, TensorBoard plugin and training monitor."""
import sys

from setuptools import Extension, find_packages, setup

# Small CPython extensions for the per-tensor and per-row hot loops (gcc and Python headers are all they need).
EXTENSIONS = [
    Extension("tbprobe.collector._cstats", ["tbprobe/collector/_cstats.c"], extra_compile_args=["-O3"],
              depends=["tbprobe/collector/_cstats_items.h", "tbprobe/collector/_cstats_untrack.h",
                       "tbprobe/collector/_cstats_stack.h", "tbprobe/collector/_cstats_api.h"]),
    Extension("tbprobe.collector._cwrite", ["tbprobe/collector/_cwrite.c"], extra_compile_args=["-O2"]),
    Extension("tbprobe.collector._cjson", ["tbprobe/collector/_cjson.c"], extra_compile_args=["-O2"]),
    Extension("tbprobe.graph_builder._rowtext", ["tbprobe/graph_builder/_rowtext.c"], extra_compile_args=["-O3"],
              depends=[f"tbprobe/graph_builder/_rowtext_{part}.h"
                       for part in ("text", "items", "json", "raw", "slots", "compare")]),
    Extension("tbprobe.formats._dump_split", ["tbprobe/formats/_dump_split.c"], extra_compile_args=["-O3"]),
]


def _torch_extension():
    """The C++ gradient hooks (tbprobe/collector/_cgrad.cpp), built against the installed torch; None without
    torch in the build environment (`pip install --no-build-isolation`, after torch, as the Makefile does): the
    collector then uses Python's hooks, with the same records, more slowly."""
    try:
        import torch
        from torch.utils.cpp_extension import CppExtension, library_paths
    except ImportError:
        print("tbprobe: torch is not importable here; the C++ gradient hooks are not built", file=sys.stderr)
        return None
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    # optional: a compiler that cannot build it costs speed, not the install (tests/collector/test_cgrad.py
    # fails where `make` did not build it)
    return CppExtension("tbprobe.collector._cgrad", ["tbprobe/collector/_cgrad.cpp"],
                        depends=["tbprobe/collector/_cstats_api.h", "tbprobe/collector/_cgrad_reader.h",
                                 "tbprobe/collector/_cgrad_shares.h", "tbprobe/collector/_cgrad_watch.h"],
                        extra_compile_args=["-O2", "-g0", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"],
                        runtime_library_dirs=library_paths(), optional=True)


_CGRAD = _torch_extension()
if _CGRAD is not None:
    EXTENSIONS.append(_CGRAD)

setup(
    name="tbprobe",
    version="0.1.0",
    description="Find where numerical precision goes wrong in deep-learning training.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["tbprobe", "tbprobe.*"]),
    # The built frontend bundle ships inside the package.
    package_data={"tbprobe.tb_plugin": ["static/*", "static/**/*"]},
    include_package_data=True,
    ext_modules=EXTENSIONS,
    install_requires=[
        # The CPU build lies on this disk; an unpinned torch pulls a multi-GB CUDA build.
        "torch==2.13.0",
        "tensorboard==2.21.0",
        # MindSpore 2.10 breaks on numpy 2.
        "numpy<2",
        "werkzeug>=2.2",
        "pyyaml>=6",
        "tqdm>=4.60",
        "openpyxl>=3.1",
        # dump.json entries decode ~2x faster (the json module remains the fallback and the error reporter)
        "orjson>=3.9",
        # the plugin's search runs users' regular expressions with a deadline, which the re module has not (one
        # pattern such as `(.|.)*!` held the GIL and hung the whole TensorBoard server)
        "regex>=2023.0",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "playwright>=1.45",
            "ruff>=0.6",
            "psutil>=5.9",
        ],
        "mindspore": ["mindspore==2.10.0"],
    },
    entry_points={
        "console_scripts": ["tbprobe = tbprobe.cli:main"],
        "tensorboard_plugins": ["graph_ascend = tbprobe.tb_plugin.graph_ascend_plugin:GraphAscendLoader"],
    },
)
