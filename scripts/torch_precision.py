#!/usr/bin/env python3
"""torch_ref.py's protocol at a chosen precision: the same models (imported from
../shared/bench/torch_ref.py), batch, optimiser (Adam 1e-4, label smoothing 0.1, clip 1.0),
3 warm-up steps, then timed training steps and greedy passes; the same JSON lines, with
"precision" added.

  --precision f32    f32 products with TF32 off on both matmul and cuDNN (torch_ref.py leaves
                     cuDNN's TF32 at PyTorch's default, on: its LSTMs' products would not be f32)
  --precision mixed  torch.autocast(float16) around forward and loss, torch.amp.GradScaler
                     (unscale before the clip, as PyTorch's AMP recipe does); decoding under
                     autocast too

usage: torch_precision.py --precision f32|mixed [--device cuda] [--threads N] [--steps 20]
                          [--models lstm,transformer] [--refs ../shared/bench]
Used by scripts/bench-vs-torch.sh --precision and scripts/gpu-session.sh."""
import argparse, json, os, sys, time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["f32", "mixed"], required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--models", default="")
    ap.add_argument("--refs", default=os.environ.get("S2S_SHARED", os.path.join(os.path.dirname(__file__), "../../shared")) + "/bench")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.refs))
    import torch
    import torch.nn.functional as F
    import torch_ref

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    spec = json.load(open(os.path.join(a.refs, "models.json")))
    b = spec["batch"]
    B, S, T, V, W = b["sentences"], b["src_len"], b["tgt_len"], b["src_vocab"], b["tgt_vocab"]
    dev = torch.device(a.device)
    mixed = a.precision == "mixed"
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    autocast = lambda: torch.autocast(dev.type, dtype=torch.float16, enabled=mixed)
    names = a.models.split(",") if a.models else list(spec["models"])
    for name in names:
        c = spec["models"][name]
        m = torch_ref.build(c, V, W).to(dev)
        opt = torch.optim.Adam(m.parameters(), 1e-4)
        scaler = torch.amp.GradScaler(dev.type, init_scale=2.0**7, enabled=mixed)
        x = torch.randint(4, V, (B, S), device=dev)
        y = torch.randint(4, W, (B, T + 1), device=dev)

        def train_step():
            opt.zero_grad(set_to_none=True)
            with autocast():
                logits = m(x, y[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, W).float(), y[:, 1:].reshape(-1), label_smoothing=0.1)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            return loss

        m.train()
        for _ in range(3):
            train_step()
        sync()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = train_step()
        sync()
        train_tps = a.steps * B * T / (time.perf_counter() - t0)
        m.eval()
        with torch.no_grad(), autocast():
            cached = hasattr(m, "cached_step")

            def decode():
                st = m.encode(x)
                ys = torch.full((B, 1), 2, dtype=torch.long, device=dev)
                if cached:
                    st = m.cached_start(st)
                for _ in range(T):
                    logits, st = (m.cached_step if cached else m.step)(st, ys)
                    ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], 1)
                return ys

            decode()
            sync()
            t0 = time.perf_counter()
            n = max(1, a.steps // 4)
            for _ in range(n):
                decode()
            sync()
            dec_sps = n * B / (time.perf_counter() - t0)
        print(json.dumps({"model": name, "device": a.device, "threads": a.threads, "precision": a.precision,
                          "params": sum(p.numel() for p in m.parameters()),
                          "train_tokens_per_s": round(train_tps, 1), "decode_sentences_per_s": round(dec_sps, 1),
                          "train_loss": round(loss.item(), 4), "loss_scale": scaler.get_scale() if mixed else None,
                          "decode_cached": cached}), flush=True)


if __name__ == "__main__":
    main()
