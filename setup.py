"""Everything is in pyproject.toml, except one file setuptools cannot place from there.

``ranktop launch`` needs ``ranktop-auto.pth`` at the top of site-packages (the
only place the interpreter reads ``.pth`` files from at start-up; see
``probe/autostart.py``). A wheel's root *is* site-packages, so ``build_py``
copies the file there, for regular and editable installs alike.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "ranktop-auto.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join("probe", PTH), os.path.join(self.build_lib, PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
