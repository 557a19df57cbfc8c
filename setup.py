"""Build of the native measurement core and the workload launcher; everything else
is in pyproject.toml."""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = Path("src/noisescope/_native")
LAUNCHER = NATIVE / "launcher" / "launch.c"
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-fno-strict-aliasing"]


class BuildWithLauncher(build_ext):
    """Also builds noisescope-launch, a small program (not a Python module) that
    spawns workload runs; see its source for why it exists."""

    def run(self):
        super().run()
        package = Path("src/noisescope") if self.inplace else Path(self.build_lib) / "noisescope"
        objects = self.compiler.compile([str(LAUNCHER)], output_dir=self.build_temp,
                                        extra_postargs=CFLAGS)
        self.compiler.link_executable(objects, "noisescope-launch",
                                      output_dir=str(package / "libexec"))


setup(
    cmdclass={"build_ext": BuildWithLauncher},
    ext_modules=[
        Extension(
            "noisescope._native",
            sources=sorted(str(p) for p in NATIVE.glob("*.c")),
            depends=sorted(str(p) for p in NATIVE.glob("*.h")),
            extra_compile_args=CFLAGS,
            libraries=["rt", "pthread"],
        )
    ]
)
