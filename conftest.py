"""What every pytest run of this repository sets first, whatever it collects.

It sits at the top so that it also applies when a single notebook is run
(``pytest notebooks/07_mistakes.ipynb``); tests/conftest.py holds the rest.
"""

import os

#: The vector instructions every run of the tests may use, at most. The committed
#: outputs were made with AVX2 kernels (``make notebooks`` sets the same);
#: on a CPU with AVX-512, torch, MKL and oneDNN would otherwise pick kernels
#: that round some last printed digits differently. Set before any kernel,
#: forkserver or rank starts, so all of them inherit it.
SAME_DIGITS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
for _name, _value in SAME_DIGITS.items():
    os.environ.setdefault(_name, _value)
