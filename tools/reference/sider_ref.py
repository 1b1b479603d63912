#!/usr/bin/env python3
"""PyTorch reference of the Sider_CAPTCHA_Solver 1.1.x model (Lite-HRNet-18 + LiteFPN, no TAMH).

Written from /work/shared/MODEL_SPEC.md (section numbers below refer to it), docs/MODEL.md
(layouts, initialisation) and docs/LOSS.md (the `sider` and `corrected` loss variants).
It is an independent second implementation used to produce the golden files the C++/CUDA
backend is tested against; it is never needed at build or CI time.

Contents
  SiderModel                 module tree whose state_dict equals tests/data/sider_state_dict.tsv
  init_weights(model, seed)  counter-based kaiming fan_out init, bit-identical to model/init.cpp
  build_targets / loss       MODEL_SPEC §2-§3, variants 'sider' and 'corrected'
  decode / metrics           MODEL_SPEC §1.7, §8, §3.5
  oihw_to_krsc / krsc_to_oihw, params_to_flat / flat_to_params   layout helpers
"""
import math
import os
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PARAMS_2CH = 3284270
PARAMS_4CH = 3284846
STRIDE = 4

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
TSV_CANDIDATES = [
    os.path.join(_REPO, "tests", "data", "sider_state_dict.tsv"),
    "/work/shared/sider_state_dict.tsv",
]


# ------------------------------------------------------------------------------------------------
# Building blocks (MODEL_SPEC §1.2)
# ------------------------------------------------------------------------------------------------
class ConvBNAct(nn.Module):
    """Conv2d(padding=(k-1)//2) -> BatchNorm2d(eps 1e-5, momentum 0.1) -> act ('silu'|'relu'|None)."""

    def __init__(self, cin, cout, k=1, s=1, groups=1, act="silu", bias=False):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=s, padding=(k - 1) // 2, groups=groups, bias=bias)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
        if act == "silu":
            self.act = nn.SiLU()
        elif act == "relu":
            self.act = nn.ReLU()
        elif act is None:
            self.act = nn.Identity()
        else:
            raise ValueError(act)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class DSConv(nn.Module):
    """Depthwise 3x3 (stride s) + BN + SiLU, then pointwise 1x1 + BN + SiLU."""

    def __init__(self, cin, cout, s=1):
        super().__init__()
        self.dw_conv = ConvBNAct(cin, cin, 3, s, groups=cin, act="silu")
        self.pw_conv = ConvBNAct(cin, cout, 1, 1, act="silu")

    def forward(self, x):
        return self.pw_conv(self.dw_conv(x))


class LiteBlock(nn.Module):
    """Inverted residual, expansion 2, stride 1, residual always on."""

    def __init__(self, c, expansion=2):
        super().__init__()
        h = c * expansion
        self.pw_expand = ConvBNAct(c, h, 1, act="silu")
        self.dw_conv = ConvBNAct(h, h, 3, 1, groups=h, act="silu")
        self.pw_project = ConvBNAct(h, c, 1, act=None)

    def forward(self, x):
        return x + self.pw_project(self.dw_conv(self.pw_expand(x)))


def _blocks(c, n):
    return nn.Sequential(*[LiteBlock(c) for _ in range(n)])


def _up(cin, cout, factor):
    """Upsample (bilinear, align_corners=False) first, then 1x1 ConvBN (linear)."""
    return nn.Sequential(nn.Upsample(scale_factor=factor, mode="bilinear", align_corners=False),
                         ConvBNAct(cin, cout, 1, act=None))


def _down_chain(cin, cout, n):
    """n stride-2 DSConvs; all but the last keep cin channels. n == 1 gives a bare DSConv."""
    if n == 1:
        return DSConv(cin, cout, 2)
    return nn.Sequential(*[DSConv(cin, cin if i < n - 1 else cout, 2) for i in range(n)])


# ------------------------------------------------------------------------------------------------
# Stages (MODEL_SPEC §1.3). Module creation order == state_dict order of sider_state_dict.tsv.
# ------------------------------------------------------------------------------------------------
class Stem(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.conv1 = ConvBNAct(cin, 32, 3, 2)
        self.conv2 = ConvBNAct(32, 32, 3, 2)
        self.lite_blocks = _blocks(32, 2)

    def forward(self, x):
        return self.lite_blocks(self.conv2(self.conv1(x)))


class Fusion2(nn.Module):
    def __init__(self):
        super().__init__()
        self.up_1_8_to_1_4 = _up(64, 32, 2)
        self.smooth_1_4 = ConvBNAct(32, 32, 3)
        self.down_1_4_to_1_8 = _down_chain(32, 64, 1)
        self.smooth_1_8 = ConvBNAct(64, 64, 3)

    def forward(self, x1, x2):
        y1 = self.smooth_1_4(x1 + self.up_1_8_to_1_4(x2))
        y2 = self.smooth_1_8(x2 + self.down_1_4_to_1_8(x1))
        return y1, y2


class Fusion3(nn.Module):
    def __init__(self):
        super().__init__()
        self.up_1_8_to_1_4 = _up(64, 32, 2)
        self.up_1_16_to_1_4 = _up(128, 32, 4)
        self.smooth_1_4 = ConvBNAct(32, 32, 3)
        self.down_1_4_to_1_8 = _down_chain(32, 64, 1)
        self.up_1_16_to_1_8 = _up(128, 64, 2)
        self.smooth_1_8 = ConvBNAct(64, 64, 3)
        self.down_1_4_to_1_16 = _down_chain(32, 128, 2)
        self.down_1_8_to_1_16 = _down_chain(64, 128, 1)
        self.smooth_1_16 = ConvBNAct(128, 128, 3)

    def forward(self, z1, z2, z3):
        t1 = self.smooth_1_4(z1 + self.up_1_8_to_1_4(z2) + self.up_1_16_to_1_4(z3))
        t2 = self.smooth_1_8(z2 + self.down_1_4_to_1_8(z1) + self.up_1_16_to_1_8(z3))
        t3 = self.smooth_1_16(z3 + self.down_1_4_to_1_16(z1) + self.down_1_8_to_1_16(z2))
        return t1, t2, t3


class Fusion4(nn.Module):
    def __init__(self):
        super().__init__()
        self.up_1_8_to_1_4 = _up(64, 32, 2)
        self.up_1_16_to_1_4 = _up(128, 32, 4)
        self.up_1_32_to_1_4 = _up(256, 32, 8)
        self.smooth_1_4 = ConvBNAct(32, 32, 3)
        self.down_1_4_to_1_8 = _down_chain(32, 64, 1)
        self.up_1_16_to_1_8 = _up(128, 64, 2)
        self.up_1_32_to_1_8 = _up(256, 64, 4)
        self.smooth_1_8 = ConvBNAct(64, 64, 3)
        self.down_1_4_to_1_16 = _down_chain(32, 128, 2)
        self.down_1_8_to_1_16 = _down_chain(64, 128, 1)
        self.up_1_32_to_1_16 = _up(256, 128, 2)
        self.smooth_1_16 = ConvBNAct(128, 128, 3)
        self.down_1_4_to_1_32 = _down_chain(32, 256, 3)
        self.down_1_8_to_1_32 = _down_chain(64, 256, 2)
        self.down_1_16_to_1_32 = _down_chain(128, 256, 1)
        self.smooth_1_32 = ConvBNAct(256, 256, 3)

    def forward(self, u1, u2, u3, u4):
        b1 = self.smooth_1_4(u1 + self.up_1_8_to_1_4(u2) + self.up_1_16_to_1_4(u3)
                             + self.up_1_32_to_1_4(u4))
        b2 = self.smooth_1_8(u2 + self.down_1_4_to_1_8(u1) + self.up_1_16_to_1_8(u3)
                             + self.up_1_32_to_1_8(u4))
        b3 = self.smooth_1_16(u3 + self.down_1_4_to_1_16(u1) + self.down_1_8_to_1_16(u2)
                              + self.up_1_32_to_1_16(u4))
        b4 = self.smooth_1_32(u4 + self.down_1_4_to_1_32(u1) + self.down_1_8_to_1_32(u2)
                              + self.down_1_16_to_1_32(u3))
        return b1, b2, b3, b4


class Stage2(nn.Module):
    def __init__(self):
        super().__init__()
        self.t2_b1_keep = ConvBNAct(32, 32, 1)
        self.t2_b2_down = DSConv(32, 64, 2)
        self.branch_1_4 = _blocks(32, 2)
        self.branch_1_8 = _blocks(64, 2)
        self.fusion = Fusion2()

    def forward(self, x):
        x1 = self.branch_1_4(self.t2_b1_keep(x))
        x2 = self.branch_1_8(self.t2_b2_down(x))
        return self.fusion(x1, x2)


class Stage3(nn.Module):
    def __init__(self):
        super().__init__()
        self.t3_b3_from_1_8 = DSConv(64, 128, 2)
        self.branch_1_4 = _blocks(32, 3)
        self.branch_1_8 = _blocks(64, 3)
        self.branch_1_16 = _blocks(128, 3)
        self.fusion = Fusion3()

    def forward(self, y1, y2):
        z3 = self.t3_b3_from_1_8(y2)
        return self.fusion(self.branch_1_4(y1), self.branch_1_8(y2), self.branch_1_16(z3))


class Stage4(nn.Module):
    def __init__(self):
        super().__init__()
        self.t4_b4_from_1_16 = DSConv(128, 256, 2)
        self.branch_1_4 = _blocks(32, 2)
        self.branch_1_8 = _blocks(64, 2)
        self.branch_1_16 = _blocks(128, 2)
        self.branch_1_32 = _blocks(256, 2)
        self.fusion = Fusion4()

    def forward(self, t1, t2, t3):
        u4 = self.t4_b4_from_1_16(t3)
        return self.fusion(self.branch_1_4(t1), self.branch_1_8(t2), self.branch_1_16(t3),
                           self.branch_1_32(u4))


class WeightedFusion(nn.Module):
    """(softplus(wa)*a + softplus(wb)*b) / (softplus(wa)+softplus(wb)+1e-4) -> 3x3 ConvBNAct SiLU."""

    def __init__(self, c=128):
        super().__init__()
        self.weight_a = nn.Parameter(torch.ones(1))
        self.weight_b = nn.Parameter(torch.ones(1))
        self.smooth = ConvBNAct(c, c, 3)

    def forward(self, a, b):
        wa = F.softplus(self.weight_a)
        wb = F.softplus(self.weight_b)
        return self.smooth((wa * a + wb * b) / (wa + wb + 1e-4))


def _up2(x):
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


class LiteFPN(nn.Module):
    def __init__(self, c=128):
        super().__init__()
        self.lateral_1_32 = ConvBNAct(256, c, 1, act=None)
        self.lateral_1_16 = ConvBNAct(128, c, 1, act=None)
        self.lateral_1_8 = ConvBNAct(64, c, 1, act=None)
        self.lateral_1_4 = ConvBNAct(32, c, 1, act=None)
        self.smooth_p5 = ConvBNAct(c, c, 3)
        self.fuse_1_16 = WeightedFusion(c)
        self.fuse_1_8 = WeightedFusion(c)
        self.fuse_1_4 = WeightedFusion(c)

    def forward(self, b1, b2, b3, b4):
        p5 = self.lateral_1_32(b4)
        p4 = self.lateral_1_16(b3)
        p3 = self.lateral_1_8(b2)
        hr = self.lateral_1_4(b1)
        p5s = self.smooth_p5(p5)
        p4td = self.fuse_1_16(_up2(p5s), p4)
        p3td = self.fuse_1_8(_up2(p4td), p3)
        return self.fuse_1_4(hr, _up2(p3td))


class Head(nn.Module):
    def __init__(self, cin, cmid, cout):
        super().__init__()
        self.conv1 = ConvBNAct(cin, cmid, 3, act="relu", bias=True)
        self.conv2 = nn.Conv2d(cmid, cout, 1, bias=True)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class DualHead(nn.Module):
    def __init__(self, cin=128, cmid=64):
        super().__init__()
        self.heatmap_gap = Head(cin, cmid, 1)
        self.heatmap_piece = Head(cin, cmid, 1)
        self.offset = Head(cin, cmid, 4)
        self.angle = Head(cin, cmid, 2)

    def forward(self, hf):
        return OrderedDict(heatmap_gap=self.heatmap_gap(hf), heatmap_piece=self.heatmap_piece(hf),
                           offset=self.offset(hf), angle=self.angle(hf))


def activate(logits):
    """Heads' activations: sigmoid, 0.5*tanh, L2-normalise over channels (eps 1e-12)."""
    return OrderedDict(
        heatmap_gap=torch.sigmoid(logits["heatmap_gap"]),
        heatmap_piece=torch.sigmoid(logits["heatmap_piece"]),
        offset=0.5 * torch.tanh(logits["offset"]),
        angle=F.normalize(logits["angle"], p=2, dim=1, eps=1e-12),
    )


class SiderModel(nn.Module):
    """Lite-HRNet-18 + LiteFPN + DualHead. forward(x) -> (logits, outputs[, acts])."""

    def __init__(self, input_channels=2):
        super().__init__()
        assert input_channels in (2, 4)
        self.input_channels = input_channels
        self.stem = Stem(input_channels)
        self.stage2 = Stage2()
        self.stage3 = Stage3()
        self.stage4 = Stage4()
        self.lite_fpn = LiteFPN(128)
        self.dual_head = DualHead(128, 64)

    def forward(self, x, return_acts=False):
        n, c, h, w = x.shape
        assert c == self.input_channels and h % 32 == 0 and w % 32 == 0, x.shape
        s = self.stem(x)
        y = self.stage2(s)
        t = self.stage3(*y)
        b = self.stage4(*t)
        hf = self.lite_fpn(*b)
        logits = self.dual_head(hf)
        outs = activate(logits)
        outs["offset_gap"] = outs["offset"][:, 0:2]
        outs["offset_slider"] = outs["offset"][:, 2:4]
        if not return_acts:
            return logits, outs
        acts = OrderedDict()
        acts["stem"] = s
        # stage<k>.<j>: fusion output of branch j (0 = 1/4, 1 = 1/8, 2 = 1/16, 3 = 1/32)
        for name, group in (("stage2", y), ("stage3", t), ("stage4", b)):
            for j, a in enumerate(group):
                acts["%s.%d" % (name, j)] = a
        acts["fpn"] = hf  # Hf, the LiteFPN output
        return logits, outs, acts


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def read_state_dict_tsv(path=None):
    if path is None:
        path = next((p for p in TSV_CANDIDATES if os.path.exists(p)), None)
        if path is None:
            return None
    rows = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            name, shape, kind = line.split("\t")
            shp = () if shape == "scalar" else tuple(int(v) for v in shape.split("x"))
            rows.append((name, shp, kind))
    return rows


def check_against_tsv(model, path=None):
    """Assert state_dict keys, shapes, order (and param/buffer split) equal the tsv. Returns
    False if no tsv is reachable, True if it matched."""
    rows = read_state_dict_tsv(path)
    if rows is None:
        return False
    sd = model.state_dict()
    pnames = {n for n, _ in model.named_parameters()}
    assert len(sd) == len(rows), (len(sd), len(rows))
    for (k, v), (name, shp, kind) in zip(sd.items(), rows):
        assert k == name, (k, name)
        assert tuple(v.shape) == shp, (k, tuple(v.shape), shp)
        assert (kind == "param") == (k in pnames), (k, kind)
    return True


def build_model(input_channels=2, check_tsv=True):
    m = SiderModel(input_channels)
    n = count_params(m)
    expect = PARAMS_2CH if input_channels == 2 else PARAMS_4CH
    assert n == expect, (n, expect)
    if check_tsv and input_channels == 2:
        check_against_tsv(m)
    return m


# ------------------------------------------------------------------------------------------------
# Initialisation (docs/MODEL.md): counter-based generator, bit-identical to the C++ side
# ------------------------------------------------------------------------------------------------
_M64 = (1 << 64) - 1
_GAMMA, _C1, _C2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def mix_int(z):
    z = (z + _GAMMA) & _M64
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    return z ^ (z >> 31)


def mix_np(z):
    """Same as mix_int on a numpy uint64 array (wrapping arithmetic)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_C1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_C2)
    return z ^ (z >> np.uint64(31))


def h_int(seed, t, j):
    return mix_int(mix_int(mix_int(seed & _M64) ^ t) ^ j)


def normal_draws(seed, t, numel):
    """z_i for i in [0, numel): float64 numpy array, computed per element with Python's math."""
    base = mix_int(mix_int(seed & _M64) ^ t)
    j = np.arange(2 * numel, dtype=np.uint64)
    hv = mix_np(np.uint64(base) ^ j)
    b = hv >> np.uint64(11)
    # (b + 1) <= 2^53 and b < 2^53 are exact in float64; the scale by 2^-53 is exact.
    u1 = ((b[0::2] + np.uint64(1)).astype(np.float64) * (2.0 ** -53)).tolist()
    u2 = (b[1::2].astype(np.float64) * (2.0 ** -53)).tolist()
    log, cos, sqrt, two_pi = math.log, math.cos, math.sqrt, 2.0 * math.pi
    z = [sqrt(-2.0 * log(a)) * cos(two_pi * c) for a, c in zip(u1, u2)]
    return np.array(z, dtype=np.float64)


def conv_init_values(seed, t, shape):
    """float32 values of a conv weight of OIHW `shape`, flat in PyTorch contiguous order."""
    cout, _, kh, kw = shape
    numel = int(np.prod(shape))
    std = math.sqrt(2.0 / (cout * kh * kw))
    z = normal_draws(seed, t, numel)
    return (z * std).astype(np.float32)  # std*z in double, then round to nearest float32


@torch.no_grad()
def init_weights(model, seed):
    conv_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Conv2d)}
    conv_biases = {id(m.bias) for m in model.modules() if isinstance(m, nn.Conv2d) and m.bias is not None}
    bn_w = {id(m.weight) for m in model.modules() if isinstance(m, nn.BatchNorm2d)}
    bn_b = {id(m.bias) for m in model.modules() if isinstance(m, nn.BatchNorm2d)}
    for t, (name, p) in enumerate(model.named_parameters()):
        if id(p) in conv_weights:
            v = conv_init_values(seed, t, tuple(p.shape))
            p.copy_(torch.from_numpy(v).reshape(p.shape).to(p.dtype))
        elif id(p) in conv_biases or id(p) in bn_b:
            p.zero_()
        elif id(p) in bn_w:
            p.fill_(1.0)
        elif name.endswith(".weight_a") or name.endswith(".weight_b"):
            p.fill_(1.0)
        else:
            raise RuntimeError("unhandled parameter " + name)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
    return model


# ------------------------------------------------------------------------------------------------
# Layout helpers (docs/MODEL.md: conv filters are KRSC = (Cout, kh, kw, Cin/g) in the flat buffer)
# ------------------------------------------------------------------------------------------------
def oihw_to_krsc(w):
    """OIHW tensor -> KRSC tensor (contiguous)."""
    return w.permute(0, 2, 3, 1).contiguous()


def krsc_to_oihw(flat, oihw_shape):
    """flat (or KRSC-shaped) KRSC data -> OIHW tensor of `oihw_shape` (contiguous)."""
    o, i, kh, kw = oihw_shape
    return flat.reshape(o, kh, kw, i).permute(0, 3, 1, 2).contiguous()


def params_to_flat(model):
    """All parameters in named_parameters order, conv weights in KRSC, concatenated 1-D."""
    return torch.cat([(oihw_to_krsc(p.detach()) if p.dim() == 4 else p.detach()).reshape(-1)
                      for _, p in model.named_parameters()])


@torch.no_grad()
def flat_to_params(model, flat):
    off = 0
    for _, p in model.named_parameters():
        n = p.numel()
        chunk = flat[off:off + n]
        p.copy_(krsc_to_oihw(chunk, tuple(p.shape)) if p.dim() == 4 else chunk.reshape(p.shape))
        off += n
    assert off == flat.numel()


# Loss, targets, decode and metrics live in sider_loss.py; re-exported here so callers use one module.
from sider_loss import *  # noqa: E402,F401,F403
from sider_loss import TERMS, WEIGHTS  # noqa: E402,F401
