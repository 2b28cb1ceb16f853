import sys; sys.path.insert(0, "/work/wt-adv/python")
from gpushim import _jupyter
_jupyter._remove_stale_cell_dirs("/tmp/adv/jt")
import os; print(sorted(os.listdir("/tmp/adv/jt")))
