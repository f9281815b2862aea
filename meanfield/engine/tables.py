"""The codes and column layout of the engine's head tables (a leaf module).

``meanfield.engine.reduce`` builds the integer and float head tables whose
columns these constants name; kernels and helpers that only read a table
(``meanfield.engine.lowrank``, ...) import the names from here, so that they
need not import ``reduce`` itself. ``reduce`` re-exports every name.
"""

ATT = {"softmax": 0, "linear": 1}
KQC = {"separate": 0, "merged": 1}
QRY = {"mean": 0, "last": 1, "fixed": 2}
VAL = {"neuron": 0, "linear": 1, "matrix": 2, "token": 3}
LOSS = {"logistic": 0, "squared": 1, "cross_entropy": 2}
GROUP_BIT = {"attention": 1, "values": 2, "readout": 4, "signs": 8}
GROUP_CODE = {"attention": 0, "values": 1, "readout": 2}

# columns of the integer head table
(H_ATT, H_KQ, H_QRY, H_QSELF, H_VAL, H_NN, H_C, H_N, H_QOFF, H_IK, H_IQ, H_IV, H_IR, H_WOFF, H_VOFF,
 H_AOFF, H_MASK, H_BOFF, H_BL) = range(19)  # H_MASK: 1 causal; H_BOFF, H_BL: relative positional
# biases b[l - i + H_BL] (2 H_BL + 1 of them; meanfield.engine.positions)
# columns of the float head table
F_SCALE, F_SIGN, F_LR, F_RW, F_RV, F_RA, F_RB = range(7)  # F_R*: group rate / step size (engine.rates)
F_RIDGE = 7  # the training's ridge lambda on the head's attention parameters (meanfield.engine.ridge)
