#!/usr/bin/env python3
"""Reader (and a small writer, for tests) of slidefuse compact shards, version 1 (docs/FORMAT.md),
in numpy only: memory-mapped pixels, a structured array of the 72-byte label records, per-record
CRC-32 (zlib's), quant4 unpacking. Plus the loader's per-epoch order (data/loader_order.cpp) and
a synthetic batch maker for the baselines' --synthetic mode.

    ds = Dataset("data/processed/train")        # every *.sfshard in the folder, sorted by path
    pix, lab = ds.batch([0, 1, 2])              # (3, H, W, C) uint8, (3,) LABEL_DTYPE records
    order = epoch_order(ds.count, seed, epoch)  # the order slidefuse's loader reads epoch `epoch` in

The model input is built from these on the device by torch_baseline.preprocess (channels
[pixels/255 ..., valid mask], the mask from the label rectangle), as kernels/preprocess.cu does.
"""
import glob
import json
import os
import struct
import zlib

import numpy as np

MAGIC = b"SFSHARD\0"
VERSION = 1
HEADER_BYTES = 128
PIXELS_OFFSET = 4096
LABEL_BYTES = 72
SECTION_ALIGN = 64
FLAG_QUANT4 = 1
MAX_FAKES = 4
EXTENSION = ".sfshard"

# data::Label (data/label.h), little-endian, packed.
LABEL_DTYPE = np.dtype([
    ("gap_x", "<f4"), ("gap_y", "<f4"), ("slider_x", "<f4"), ("slider_y", "<f4"), ("angle_rad", "<f4"),
    ("num_fakes", "<i4"), ("fake_x", "<f4", (MAX_FAKES,)), ("fake_y", "<f4", (MAX_FAKES,)),
    ("rect_x0", "<f4"), ("rect_y0", "<f4"), ("rect_x1", "<f4"), ("rect_y1", "<f4"),
])
assert LABEL_DTYPE.itemsize == LABEL_BYTES

# Header: magic, version, header_bytes, count, height, width, channels, flags, label_bytes,
# pixel_bytes, pixels_offset, labels_offset, crcs_offset, file_bytes, 44 reserved bytes, header_crc.
_HEADER = struct.Struct("<8sIIQIIIIIIQQQQ44sI")
assert _HEADER.size == HEADER_BYTES


class ShardError(ValueError):
    pass


def layout(count, pixel_bytes):
    """(labels_offset, crcs_offset, file_bytes) for `count` records of `pixel_bytes` bytes."""
    pixels_end = PIXELS_OFFSET + count * pixel_bytes
    labels_offset = (pixels_end + SECTION_ALIGN - 1) // SECTION_ALIGN * SECTION_ALIGN
    crcs_offset = labels_offset + count * LABEL_BYTES
    return labels_offset, crcs_offset, crcs_offset + 4 * count


def stored_pixel_bytes(height, width, channels, quant4):
    n = height * width * channels
    return n // 2 if quant4 else n


class Shard:
    """One shard file, memory-mapped. Validates the header like data::ShardReader (messages name
    the file); record CRCs are checked by read(i, verify=True) / verify_all()."""

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        if size < HEADER_BYTES:
            raise ShardError("%s: truncated: %d bytes, the header alone needs %d" % (path, size, HEADER_BYTES))
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
        (magic, version, header_bytes, count, h, w, c, flags, label_bytes, pixel_bytes, pix_off, lab_off, crc_off,
         file_bytes, reserved, header_crc) = _HEADER.unpack(raw)
        if magic != MAGIC:
            raise ShardError("%s: not a slidefuse shard (bad magic)" % path)
        if version != VERSION:
            raise ShardError("%s: unsupported shard version %d (this reader reads version 1)" % (path, version))
        crc = zlib.crc32(raw[:HEADER_BYTES - 4]) & 0xFFFFFFFF
        if crc != header_crc:
            raise ShardError("%s: header CRC mismatch (stored 0x%08x, computed 0x%08x)" % (path, header_crc, crc))
        if flags & ~FLAG_QUANT4:
            raise ShardError("%s: unknown header flags 0x%x" % (path, flags))
        if any(reserved):
            raise ShardError("%s: reserved header bytes are not zero" % path)
        if not (1 <= h <= 16384 and 1 <= w <= 16384 and c in (1, 3)):
            raise ShardError("%s: header dims %dx%dx%d out of range" % (path, h, w, c))
        self.quant4 = bool(flags & FLAG_QUANT4)
        if self.quant4 and (h * w * c) % 2:
            raise ShardError("%s: quant4 needs an even number of values per sample" % path)
        stored = stored_pixel_bytes(h, w, c, self.quant4)
        want = dict(header_bytes=HEADER_BYTES, label_bytes=LABEL_BYTES, pixel_bytes=stored,
                    pixels_offset=PIXELS_OFFSET)
        got = dict(header_bytes=header_bytes, label_bytes=label_bytes, pixel_bytes=pixel_bytes, pixels_offset=pix_off)
        for k in want:
            if got[k] != want[k]:
                raise ShardError("%s: header field %s = %d, expected %d for this layout" % (path, k, got[k], want[k]))
        l_off, c_off, f_bytes = layout(count, stored)
        for k, g, e in (("labels_offset", lab_off, l_off), ("crcs_offset", crc_off, c_off),
                        ("file_bytes", file_bytes, f_bytes)):
            if g != e:
                raise ShardError("%s: header field %s = %d, expected %d for this layout" % (path, k, g, e))
        if size != file_bytes:
            raise ShardError("%s: file is %d bytes, the header describes %d (%s)" %
                             (path, size, file_bytes, "truncated" if size < file_bytes else "trailing data"))
        self.count, self.height, self.width, self.channels = count, h, w, c
        self.pixel_bytes = stored
        mm = np.memmap(path, dtype=np.uint8, mode="r") if size > 0 else None
        self._mm = mm
        self.pixels = mm[PIXELS_OFFSET:PIXELS_OFFSET + count * stored].reshape(count, stored) if count else \
            np.zeros((0, stored), np.uint8)
        self.labels = mm[l_off:l_off + count * LABEL_BYTES].view(LABEL_DTYPE) if count else \
            np.zeros(0, LABEL_DTYPE)
        self.crcs = mm[c_off:c_off + 4 * count].view("<u4") if count else np.zeros(0, "<u4")

    @property
    def spec(self):
        return (self.height, self.width, self.channels, self.quant4)

    def record_crc(self, i):
        crc = zlib.crc32(self.pixels[i].tobytes())
        return zlib.crc32(self.labels[i:i + 1].tobytes(), crc) & 0xFFFFFFFF

    def read(self, i, verify=True):
        """(pixels (H, W, C) uint8, label record). verify: check the record CRC."""
        if not 0 <= i < self.count:
            raise ShardError("%s: record %d out of range (the shard holds %d)" % (self.path, i, self.count))
        if verify:
            got = self.record_crc(i)
            if got != int(self.crcs[i]):
                raise ShardError("%s: record %d: CRC mismatch (stored 0x%08x, computed 0x%08x): the record is corrupt"
                                 % (self.path, i, int(self.crcs[i]), got))
        return unpack_pixels(self.pixels[i], self.height, self.width, self.channels, self.quant4), self.labels[i]

    def verify_all(self):
        for i in range(self.count):
            self.read(i, verify=True)


def unpack_pixels(stored, h, w, c, quant4):
    """Stored bytes of one or more samples -> (..., H, W, C) uint8 (quant4: high nibble first)."""
    stored = np.asarray(stored, dtype=np.uint8)
    if quant4:
        out = np.empty(stored.shape[:-1] + (stored.shape[-1] * 2,), np.uint8)
        out[..., 0::2] = stored & 0xF0
        out[..., 1::2] = (stored & 0x0F) << 4
        stored = out
    return stored.reshape(stored.shape[:-1] + (h, w, c))


def list_shards(folder):
    if not os.path.isdir(folder):
        raise ShardError("%s: no such directory (expected a folder of *%s files)" % (folder, EXTENSION))
    files = sorted(p for p in glob.glob(os.path.join(folder, "*" + EXTENSION)) if os.path.isfile(p))
    if not files:
        raise ShardError("%s: holds no *%s files (empty dataset)" % (folder, EXTENSION))
    return files


class Dataset:
    """A folder of shards with one spec, samples numbered globally in file order (data::Loader)."""

    def __init__(self, folder_or_files):
        files = list_shards(folder_or_files) if isinstance(folder_or_files, str) else sorted(folder_or_files)
        self.shards = [Shard(p) for p in files]
        specs = {s.spec for s in self.shards}
        if len(specs) != 1:
            raise ShardError("shards of different specs in one dataset: %s" % sorted(specs))
        self.height, self.width, self.channels, self.quant4 = specs.pop()
        self.first = np.cumsum([0] + [s.count for s in self.shards])
        self.count = int(self.first[-1])

    def locate(self, g):
        k = int(np.searchsorted(self.first, g, side="right")) - 1
        if not 0 <= g < self.count:
            raise ShardError("sample %d out of range (the dataset holds %d)" % (g, self.count))
        return self.shards[k], int(g - self.first[k])

    def batch(self, ids, verify=True):
        """(n, H, W, C) uint8 pixels and (n,) label records of global samples `ids`."""
        n = len(ids)
        pix = np.empty((n, self.height, self.width, self.channels), np.uint8)
        lab = np.empty(n, LABEL_DTYPE)
        for k, g in enumerate(ids):
            shard, i = self.locate(int(g))
            pix[k], lab[k] = shard.read(i, verify=verify)
        return pix, lab


# ------------------------------------------------------------------------------------------------
# The loader's order (data/loader_order.cpp, runtime/hash.h)
# ------------------------------------------------------------------------------------------------
_M64 = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


assert splitmix64(0) == 0xE220A8397B1DCDAF


def epoch_order(total, seed, epoch, shuffle=True, rank=0, world_size=1):
    """data::epoch_order: Fisher-Yates driven by splitmix64(key + i * C), then rank sharding."""
    perm = list(range(total))
    if shuffle and total > 1:
        key = splitmix64((seed ^ splitmix64((epoch ^ 0x5EEDF00D) & _M64)) & _M64)
        for i in range(total - 1, 0, -1):
            bits = splitmix64((key + i * 0xD1B54A32D192ED03) & _M64)
            j = (bits * (i + 1)) >> 64
            perm[i], perm[j] = perm[j], perm[i]
    return perm[rank::world_size] if world_size > 1 else perm


def batch_ids(total, batch, seed, step, shuffle=True, drop_last=True):
    """Global sample ids of training step `step` (0-based) of a loader with these settings."""
    bpe = total // batch if drop_last else (total + batch - 1) // batch
    if bpe < 1:
        raise ShardError("%d samples is less than one batch of %d" % (total, batch))
    epoch, b = divmod(step, bpe)
    order = epoch_order(total, seed, epoch, shuffle)
    return order[b * batch:min((b + 1) * batch, total)]


class EpochOrders:
    """batch_ids with the per-epoch permutation cached (a permutation is O(total) Python work)."""

    def __init__(self, total, batch, seed, shuffle=True, drop_last=True):
        self.total, self.batch, self.seed, self.shuffle = total, batch, seed, shuffle
        self.bpe = total // batch if drop_last else (total + batch - 1) // batch
        if self.bpe < 1:
            raise ShardError("%d samples is less than one batch of %d" % (total, batch))
        self._epoch, self._order = None, None

    def ids(self, step):
        epoch, b = divmod(step, self.bpe)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, epoch_order(self.total, self.seed, epoch, self.shuffle)
        return self._order[b * self.batch:min((b + 1) * self.batch, self.total)]


# ------------------------------------------------------------------------------------------------
# Labels as arrays, synthetic batches, a writer (tests)
# ------------------------------------------------------------------------------------------------
def label_arrays(lab):
    """Structured label records -> dict of float32/int64 numpy arrays (gap (N,2), slider (N,2),
    angle (N,), fakes (N,4,2), num_fakes (N,), rect (N,4) = x0, y0, x1, y1)."""
    lab = np.asarray(lab, LABEL_DTYPE)
    return {
        "gap": np.stack([lab["gap_x"], lab["gap_y"]], 1).astype(np.float32),
        "slider": np.stack([lab["slider_x"], lab["slider_y"]], 1).astype(np.float32),
        "angle": lab["angle_rad"].astype(np.float32),
        "fakes": np.stack([lab["fake_x"], lab["fake_y"]], 2).astype(np.float32),
        "num_fakes": lab["num_fakes"].astype(np.int64),
        "rect": np.stack([lab["rect_x0"], lab["rect_y0"], lab["rect_x1"], lab["rect_y1"]], 1).astype(np.float32),
    }


def synthetic_batch(n, height, width, channels=1, seed=0):
    """Random but valid samples: uint8 noise pixels (255 in the padding) and labels with a random
    letterbox rectangle (full width or full height, as the original's letterbox), gap/slider/fakes
    inside it, 0-4 fakes, a rotation on about half of the samples."""
    rng = np.random.default_rng(seed)
    pix = rng.integers(0, 256, size=(n, height, width, channels), dtype=np.uint8)
    lab = np.zeros(n, LABEL_DTYPE)
    for i in range(n):
        if rng.random() < 0.5:  # pad top/bottom
            vh = int(rng.integers(height // 2, height + 1))
            y0 = int(rng.integers(0, height - vh + 1))
            x0, x1, y1 = 0, width, y0 + vh
        else:  # pad left/right
            vw = int(rng.integers(width // 2, width + 1))
            x0 = int(rng.integers(0, width - vw + 1))
            y0, y1, x1 = 0, height, x0 + vw
        pix[i, :y0] = 255
        pix[i, y1:] = 255
        pix[i, :, :x0] = 255
        pix[i, :, x1:] = 255

        def pt():
            return (float(np.float32(rng.uniform(x0, x1 - 1e-3))), float(np.float32(rng.uniform(y0, y1 - 1e-3))))

        lab[i]["gap_x"], lab[i]["gap_y"] = pt()
        lab[i]["slider_x"], lab[i]["slider_y"] = pt()
        lab[i]["angle_rad"] = float(rng.uniform(-0.3, 0.3)) if rng.random() < 0.5 else 0.0
        nf = int(rng.integers(0, MAX_FAKES + 1))
        lab[i]["num_fakes"] = nf
        for k in range(nf):
            lab[i]["fake_x"][k], lab[i]["fake_y"][k] = pt()
        lab[i]["rect_x0"], lab[i]["rect_y0"], lab[i]["rect_x1"], lab[i]["rect_y1"] = x0, y0, x1, y1
    return pix, lab


def write_shard(path, pixels, labels, quant4=False):
    """Writes a version-1 shard (pixels (N, H, W, C) uint8, labels (N,) LABEL_DTYPE). For tests and
    small fixtures; slidefuse's own writer (data/shard_writer.cpp) is the production one."""
    pixels = np.ascontiguousarray(pixels, np.uint8)
    labels = np.ascontiguousarray(labels, LABEL_DTYPE)
    n, h, w, c = pixels.shape
    assert labels.shape == (n,)
    flat = pixels.reshape(n, h * w * c)
    if quant4:
        assert (h * w * c) % 2 == 0
        flat = (flat[:, 0::2] & 0xF0) | (flat[:, 1::2] >> 4)
    stored = flat.shape[1]
    l_off, c_off, f_bytes = layout(n, stored)
    head = _HEADER.pack(MAGIC, VERSION, HEADER_BYTES, n, h, w, c, FLAG_QUANT4 if quant4 else 0, LABEL_BYTES, stored,
                        PIXELS_OFFSET, l_off, c_off, f_bytes, bytes(44), 0)
    head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]) & 0xFFFFFFFF)
    crcs = np.array([zlib.crc32(labels[i:i + 1].tobytes(), zlib.crc32(flat[i].tobytes())) & 0xFFFFFFFF
                     for i in range(n)], "<u4")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(bytes(PIXELS_OFFSET - HEADER_BYTES))
        f.write(flat.tobytes())
        f.write(bytes(l_off - (PIXELS_OFFSET + n * stored)))
        f.write(labels.tobytes())
        f.write(crcs.tobytes())
    os.replace(tmp, path)
    assert os.path.getsize(path) == f_bytes


def write_manifest(root, source="synthetic", seed=0, count=0):
    """Writes root/manifest.json for the shards now in root/{train,val,test} (docs/FORMAT.md "Dataset
    manifest"), last and atomically, as slidefuse generate/convert do: `slidefuse train` reads a
    shard folder only with it. For tests and small fixtures."""
    splits, spec = {}, None
    for split in ("train", "val", "test"):
        files = sorted(glob.glob(os.path.join(root, split, "*.sfshard")))
        listed = []
        for path in files:
            with open(path, "rb") as f:
                raw = f.read()
            h = _HEADER.unpack(raw[:HEADER_BYTES])
            n, height, width, channels, flags, crcs_offset = h[3], h[4], h[5], h[6], h[7], h[12]
            spec = spec or {"height": height, "width": width, "channels": channels,
                            "quant4": bool(flags & FLAG_QUANT4)}
            listed.append({"file": os.path.basename(path), "samples": n, "bytes": len(raw),
                           "records_crc32": "%08x" % (zlib.crc32(raw[crcs_offset:crcs_offset + 4 * n]) & 0xFFFFFFFF)})
        if listed:
            splits[split] = {"samples": sum(s["samples"] for s in listed), "shards": listed}
    if spec is None:
        raise ShardError("%s: no shards in train/, val/ or test/" % root)
    doc = dict({"format": "slidefuse-dataset", "version": 1, "source": source, "seed": seed, "count": count},
               **spec, splits=splits)
    tmp = os.path.join(root, "manifest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, os.path.join(root, "manifest.json"))
