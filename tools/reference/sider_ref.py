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


# ------------------------------------------------------------------------------------------------
# Targets (MODEL_SPEC §3.1-§3.3) and the soft valid mask
# ------------------------------------------------------------------------------------------------
SIGMA = 1.5
RADIUS = int(3 * SIGMA)  # 4
WEIGHTS = OrderedDict(heatmap=1.0, offset=1.0, hard_negative=1.5, angle=0.5, padding_bce=0.3, y_axis=0.8)
TERMS = ("focal_gap", "focal_slider", "offset", "hard_negative", "angle", "padding_bce", "y_axis")


def _cell(x, y, gw, gh):
    """Integer grid cell int(x/s), int(y/s) (truncation), clamped into the grid."""
    u = min(max(int(x / STRIDE), 0), gw - 1)
    v = min(max(int(y / STRIDE), 0), gh - 1)
    return u, v


def build_targets(labels, n, gh, gw, dtype=torch.float64):
    """Gaussian heatmaps Y (peak 1 on the integer cell, sigma 1.5, 9x9 window clipped at the
    border), offset targets (4 ch, non-zero only at the peak cells) and the peak cells."""
    Y = {k: torch.zeros(n, 1, gh, gw, dtype=dtype) for k in ("gap", "slider")}
    off = torch.zeros(n, 4, gh, gw, dtype=dtype)
    peaks = {k: [] for k in ("gap", "slider")}
    for k, ch in (("gap", 0), ("slider", 2)):
        xy = labels[k]
        for i in range(n):
            x, y = float(xy[i, 0]), float(xy[i, 1])
            u, v = _cell(x, y, gw, gh)
            peaks[k].append((u, v))
            for r in range(max(0, v - RADIUS), min(gh, v + RADIUS + 1)):
                for c in range(max(0, u - RADIUS), min(gw, u + RADIUS + 1)):
                    Y[k][i, 0, r, c] = math.exp(-((r - v) ** 2 + (c - u) ** 2) / (2 * SIGMA * SIGMA))
            off[i, ch, v, u] = x / STRIDE - u - 0.5
            off[i, ch + 1, v, u] = y / STRIDE - v - 0.5
    return Y, off, peaks


def soft_mask(inp):
    """M = 4x4 average pool of the mask channel (the input's last channel): [N,1,h,w]."""
    return F.avg_pool2d(inp[:, -1:], STRIDE, STRIDE)


def bilinear_zero(P, u, v):
    """Bilinear sample of P[h,w] at continuous grid-index coordinates (u = column, v = row),
    zero outside, = grid_sample(align_corners=True, padding_mode='zeros') at 2u/(w-1)-1."""
    gh, gw = P.shape
    x0, y0 = math.floor(u), math.floor(v)
    fx, fy = u - x0, v - y0
    out = P.new_zeros(())
    for yy, wy in ((y0, 1.0 - fy), (y0 + 1, fy)):
        for xx, wx in ((x0, 1.0 - fx), (x0 + 1, fx)):
            if 0 <= yy < gh and 0 <= xx < gw:
                out = out + P[yy, xx] * (wy * wx)
    return out


def grid_sample_point(P, u, v):
    """The same sample via F.grid_sample (used to cross-check bilinear_zero)."""
    gh, gw = P.shape
    g = torch.tensor([[[[2.0 * u / (gw - 1) - 1.0, 2.0 * v / (gh - 1) - 1.0]]]], dtype=P.dtype)
    return F.grid_sample(P[None, None], g, mode="bilinear", padding_mode="zeros",
                         align_corners=True)[0, 0, 0, 0]


# ------------------------------------------------------------------------------------------------
# Loss terms (MODEL_SPEC §2, docs/LOSS.md)
# ------------------------------------------------------------------------------------------------
def _const(v, like):
    return torch.tensor(float(v), dtype=like.dtype)


def _focal_map(P, Y):
    Pc = torch.clamp(P, 1e-8, 1 - 1e-8)
    pos = (Y >= 0.8).to(P.dtype)
    lpos = pos * (1 - Pc) ** 1.5 * (-torch.log(Pc))
    lneg = (1 - pos) * (1 - Y) ** 4 * Pc ** 1.5 * (-torch.log(torch.clamp(1 - Pc, min=1e-8)))
    return lpos + lneg, pos


def focal_loss(P, Y, M, variant):
    ell, pos = _focal_map(P, Y)
    if variant == "sider":
        den = (pos * M).sum()
        if float(den) == 0.0:
            return _const(0.01, P)
        out = (ell * M).sum() / den
    else:
        num = (ell * M).sum(dim=(1, 2, 3))
        den = (pos * M).sum(dim=(1, 2, 3))
        keep = den > 0
        if not bool(keep.any()):
            return _const(0.01, P)
        out = (num[keep] / den[keep]).mean()
    if math.isnan(float(out)):
        return _const(1.0, P)
    return out


def _sl1(d):
    a = d.abs()
    return torch.where(a < 1.0, 0.5 * d * d, a - 0.5)


def offset_loss(off_pred, off_tgt, Y, M, peaks, variant):
    n = off_pred.shape[0]
    if variant == "sider":
        total = None
        for k, ch in (("gap", 0), ("slider", 2)):
            w = Y[k] * M
            ell = _sl1(off_pred[:, ch:ch + 1] - off_tgt[:, ch:ch + 1]) + \
                _sl1(off_pred[:, ch + 1:ch + 2] - off_tgt[:, ch + 1:ch + 2])
            ws = w.sum()
            if float(ws) < 1e-6:
                # MODEL_SPEC §2.3: gap without weight -> the whole term is 0.01;
                # slider without weight -> L_gap + 0.01.
                return _const(0.01, off_pred) if k == "gap" else total + 0.01
            lk = (w * ell).sum() / ws
            total = lk if total is None else total + lk
        return total
    # corrected: weight = M at the peak cell only; per sample, averaged over supported samples.
    total = None
    for k, ch in (("gap", 0), ("slider", 2)):
        vals = []
        for i in range(n):
            u, v = peaks[k][i]
            w = M[i, 0, v, u]
            if float(w) < 1e-6:
                continue
            d = off_pred[i, ch:ch + 2, v, u] - off_tgt[i, ch:ch + 2, v, u]
            vals.append((w * _sl1(d).sum()) / w)
        lk = torch.stack(vals).mean() if vals else _const(0.01, off_pred)
        total = lk if total is None else total + lk
    return total


def hard_negative_loss(Pg, labels, variant, margin=0.5):
    n = Pg.shape[0]
    nf = [int(v) for v in labels["num_fakes"]]
    if max(nf) == 0:
        return _const(0.0, Pg)
    K = max(nf)
    per = []
    for i in range(n):
        P = Pg[i, 0]
        sp = bilinear_zero(P, float(labels["gap"][i, 0]) / STRIDE, float(labels["gap"][i, 1]) / STRIDE)
        if variant == "sider":
            terms = []
            for k in range(K):
                if nf[i] == 0:
                    fu, fv = 0.0, 0.0
                else:
                    fx, fy = (float(c) for c in labels["fakes"][i, min(k, nf[i] - 1)])
                    # quirk: the stored integer grid cell is divided by the stride again
                    fu, fv = int(fx / STRIDE) / STRIDE, int(fy / STRIDE) / STRIDE
                terms.append(torch.clamp(margin - sp + bilinear_zero(P, fu, fv), min=0.0))
            per.append(torch.stack(terms).sum() / K)
        else:
            if nf[i] == 0:
                continue
            terms = []
            for k in range(nf[i]):
                fx, fy = (float(c) for c in labels["fakes"][i, k])
                terms.append(torch.clamp(margin - sp + bilinear_zero(P, fx / STRIDE, fy / STRIDE), min=0.0))
            per.append(torch.stack(terms).mean())
    return torch.stack(per).mean()


def angle_loss(z_ang, Y_gap, M, angles, variant):
    a = F.normalize(F.normalize(z_ang, p=2, dim=1, eps=1e-12), p=2, dim=1, eps=1e-12)
    th = torch.as_tensor(angles, dtype=z_ang.dtype)
    s, c = torch.sin(th)[:, None, None, None], torch.cos(th)[:, None, None, None]
    dot = a[:, 0:1] * s + a[:, 1:2] * c
    w = (Y_gap > 0.7).to(z_ang.dtype) * M
    if variant == "sider":
        return ((1 - dot) * w).sum() / (w.sum() + 1e-8)
    num = ((1 - dot) * w).sum(dim=(1, 2, 3))
    den = w.sum(dim=(1, 2, 3))
    keep = den > 0
    if not bool(keep.any()):
        return _const(0.0, z_ang)
    return (num[keep] / (den[keep] + 1e-8)).mean()


def padding_bce_loss(Pg, Ps, M, variant):
    if variant == "sider":
        Pg, Ps = torch.sigmoid(Pg), torch.sigmoid(Ps)  # quirk: second sigmoid
    lg = torch.clamp(-torch.log1p(-torch.clamp(Pg, 1e-4, 1 - 1e-4)), max=10.0)
    ls = torch.clamp(-torch.log1p(-torch.clamp(Ps, 1e-4, 1 - 1e-4)), max=10.0)
    pad = 1 - M
    if variant == "sider":
        den = pad.sum()
        if float(den) < 1e-8:
            return _const(0.0, Pg)
        return ((lg + ls) * pad).sum() / den
    num = ((lg + ls) * pad).sum(dim=(1, 2, 3))
    den = pad.sum(dim=(1, 2, 3))
    keep = den >= 1e-8
    if not bool(keep.any()):
        return _const(0.0, Pg)
    return (num[keep] / den[keep]).mean()


def y_axis_loss(Pg, Ps, labels, variant, tau=1.0):
    gh = Pg.shape[2]
    n = Pg.shape[0]

    def dist(P):
        e = P[:, 0].mean(dim=2)  # [N, h]
        return torch.softmax(torch.log(e + 1e-8) / tau, dim=1)

    dg, ds = dist(Pg), dist(Ps)

    def row(y):
        t = math.floor(y / STRIDE / 4) if variant == "sider" else math.floor(y / STRIDE)
        return min(max(t, 0), gh - 1)

    tg = [row(float(labels["gap"][i, 1])) for i in range(n)]
    ts = [row(float(labels["slider"][i, 1])) for i in range(n)]
    ar = torch.arange(n)
    ce = (-torch.log(dg[ar, tg] + 1e-8) - torch.log(ds[ar, ts] + 1e-8)).mean()
    emd = (torch.cumsum(dg, 1) - torch.cumsum(ds, 1)).abs().mean()
    return 1.0 * ce + 0.3 * emd


def loss(logits, inp, labels, variant="sider"):
    """Returns an OrderedDict of the unweighted terms (TERMS) and 'total'.

    logits: dict of the heads' last-conv outputs [N,c,h,w]; inp: model input [N,C,H,W] (mask =
    last channel); labels: dict gap (N,2), slider (N,2), angle (N,), fakes (N,K,2), num_fakes (N,)
    in letterbox pixels / radians."""
    assert variant in ("sider", "corrected")
    zg, zs = logits["heatmap_gap"], logits["heatmap_piece"]
    n, _, gh, gw = zg.shape
    dt = zg.dtype
    Pg, Ps = torch.sigmoid(zg), torch.sigmoid(zs)
    off = 0.5 * torch.tanh(logits["offset"])
    M = soft_mask(inp.to(dt))
    Y, off_t, peaks = build_targets(labels, n, gh, gw, dt)

    t = OrderedDict()
    t["focal_gap"] = focal_loss(Pg, Y["gap"], M, variant)
    t["focal_slider"] = focal_loss(Ps, Y["slider"], M, variant)
    t["offset"] = offset_loss(off, off_t, Y, M, peaks, variant)
    t["hard_negative"] = hard_negative_loss(Pg, labels, variant)
    use_angle = any(float(a) != 0.0 for a in labels["angle"])
    t["angle"] = angle_loss(logits["angle"], Y["gap"], M, labels["angle"], variant) if use_angle \
        else _const(0.0, zg)
    t["padding_bce"] = padding_bce_loss(Pg, Ps, M, variant)
    t["y_axis"] = y_axis_loss(Pg, Ps, labels, variant)

    weighted = [(WEIGHTS["heatmap"], t["focal_gap"]), (WEIGHTS["heatmap"], t["focal_slider"]),
                (WEIGHTS["offset"], t["offset"]), (WEIGHTS["hard_negative"], t["hard_negative"])]
    if use_angle and float(t["angle"]) > 0:
        weighted.append((WEIGHTS["angle"], t["angle"]))
    weighted += [(WEIGHTS["padding_bce"], t["padding_bce"]), (WEIGHTS["y_axis"], t["y_axis"])]
    total, valid = None, 0
    for w, v in weighted:
        if not math.isfinite(float(v)):
            continue  # non-finite terms are dropped
        valid += 1
        total = w * v if total is None else total + w * v
    t["total"] = total if valid else _const(1.0, zg)
    return t


# ------------------------------------------------------------------------------------------------
# Decoding (§1.7, §8) and metrics (§3.5)
# ------------------------------------------------------------------------------------------------
@torch.no_grad()
def decode(outputs, inp=None):
    """outputs: heatmap_gap, heatmap_piece [N,1,h,w] probabilities, and offset [N,4,h,w] (or
    offset_gap / offset_slider [N,2,h,w]). inp: model input (mask = last channel) or None.
    Returns dict of numpy arrays: gap (N,2), slider (N,2), gap_score (N,), slider_score (N,)."""
    hg = outputs["heatmap_gap"][:, 0].double().cpu().numpy().copy()
    hs = outputs["heatmap_piece"][:, 0].double().cpu().numpy().copy()
    if "offset" in outputs:
        og = outputs["offset"][:, 0:2].double().cpu().numpy().copy()
        os_ = outputs["offset"][:, 2:4].double().cpu().numpy().copy()
    else:
        og = outputs["offset_gap"].double().cpu().numpy().copy()
        os_ = outputs["offset_slider"].double().cpu().numpy().copy()
    n, gh, gw = hg.shape
    if inp is not None:
        valid = (-F.max_pool2d(-inp[:, -1:].double(), STRIDE, STRIDE))[:, 0].cpu().numpy()
        inval = valid < 0.5  # min-pool of a binary mask: 0 where the cell holds any padding
        hg[inval] = -np.inf
        hs[inval] = -np.inf
        og *= valid[:, None]
        os_ *= valid[:, None]
    W, H = gw * STRIDE, gh * STRIDE

    def coords(off, i, r, c):
        x = (c + 0.5 + off[i, 0, r, c]) * STRIDE
        y = (r + 0.5 + off[i, 1, r, c]) * STRIDE
        return min(max(x, 0.0), W), min(max(y, 0.0), H)

    res = {k: np.zeros((n, 2)) for k in ("gap", "slider")}
    res.update({k: np.zeros(n) for k in ("gap_score", "slider_score")})
    for i in range(n):
        pk = {}
        for name, hm, off in (("gap", hg, og), ("slider", hs, os_)):
            idx = int(np.argmax(hm[i]))  # first maximum in row-major order
            r, c = divmod(idx, gw)
            pk[name] = (r, c, hm[i, r, c])
            res[name][i] = coords(off, i, r, c)
            res[name + "_score"][i] = hm[i, r, c]
        # y alignment: the higher-scoring object is the reference (slider on ties)
        ref, other = ("gap", "slider") if pk["gap"][2] > pk["slider"][2] else ("slider", "gap")
        rr = min(max(int(round(res[ref][i, 1] / STRIDE - 0.5)), 0), gh - 1)
        lo, hi = max(rr - 1, 0), min(rr + 1, gh - 1)
        hm, off = (hg, og) if other == "gap" else (hs, os_)
        band = hm[i, lo:hi + 1]
        idx = int(np.argmax(band))
        r, c = divmod(idx, gw)
        res[other][i] = coords(off, i, lo + r, c)  # score is not updated
    return res


def metrics(pred, gt_gap, gt_slider):
    """§3.5: per-object err = mean(|dx|,|dy|) in letterbox px; combined = mean of the two."""
    gt_gap, gt_slider = np.asarray(gt_gap, float), np.asarray(gt_slider, float)
    eg = np.abs(pred["gap"] - gt_gap).mean(axis=1)
    es = np.abs(pred["slider"] - gt_slider).mean(axis=1)
    comb = (eg + es) / 2
    return OrderedDict(mae_px=float(comb.mean()), rmse_px=float(np.sqrt((comb ** 2).mean())),
                       gap_mae=float(eg.mean()), slider_mae=float(es.mean()),
                       hit_le_2px=float(100.0 * (comb <= 2).mean()),
                       hit_le_5px=float(100.0 * (comb <= 5).mean()))


if __name__ == "__main__":
    for ch in (2, 4):
        m = build_model(ch)
        print("input_channels=%d params=%d" % (ch, count_params(m)))
    print("state_dict matches tsv:", check_against_tsv(build_model(2)))
