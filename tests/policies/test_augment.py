"""DrQ random shift: shapes kept, content moved by whole pixels, borders replicated."""

import torch

from policies.augment import random_shift


def test_random_shift_keeps_shapes_and_moves_content_by_whole_pixels():
    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (6, 2, 16, 20, 3), dtype=torch.uint8)
    out = random_shift(imgs, pad=3, generator=g)
    assert out.shape == imgs.shape and out.dtype == torch.float32
    moved = 0
    for b in range(6):
        for n in range(2):
            src, dst = imgs[b, n].float(), out[b, n]
            padded = torch.nn.functional.pad(src.permute(2, 0, 1)[None], (3, 3, 3, 3), mode="replicate")[0]
            hits = [
                (dy, dx)
                for dy in range(7)
                for dx in range(7)
                if torch.equal(padded[:, dy : dy + 16, dx : dx + 20].permute(1, 2, 0), dst)
            ]
            assert hits, "each output frame is the padded frame cropped at some offset"
            moved += (3, 3) not in hits
    assert moved > 0  # and offsets are random, not always the centre
    assert torch.equal(random_shift(imgs, pad=0), imgs.float())
