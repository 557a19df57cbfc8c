"""Build of the native measurement core; everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path("src/noisescope/_native")

setup(
    ext_modules=[
        Extension(
            "noisescope._native",
            sources=sorted(str(p) for p in NATIVE.glob("*.c")),
            depends=sorted(str(p) for p in NATIVE.glob("*.h")),
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-fno-strict-aliasing"],
            libraries=["rt", "pthread"],
        )
    ]
)
