#!/usr/bin/env python3
"""Answer time of a running `s2s studio`: median latency of one request at three source
lengths (every model, beam 5, with the reference), then N concurrent requests.

    s2s studio runs/quickstart --port 8340 &
    scripts/studio-load.py [http://127.0.0.1:8340] [--concurrent 64] [--threads 16]

Standard library only.
"""
import argparse
import concurrent.futures as cf
import json
import statistics
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url", nargs="?", default="http://127.0.0.1:8340")
    ap.add_argument("--concurrent", type=int, default=64)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    info = json.load(urllib.request.urlopen(a.url + "/api/info"))
    examples = info["examples"]
    models = ", ".join(m["name"] for m in info["models"])
    print(f"models: {models}; device: {info['device']}")

    def ask(e):
        body = json.dumps({"text": e["source"], "reference": e["reference"], "beam": 5}).encode()
        req = urllib.request.Request(a.url + "/api/translate", data=body, headers={"content-type": "application/json"})
        t = time.perf_counter()
        with urllib.request.urlopen(req) as r:
            n = len(r.read())
        return time.perf_counter() - t, n

    print("| source words | median ms | answer bytes |")
    print("|---|---|---|")
    for words in (5, 20, 40):
        pick = [e for e in examples if e["words"] >= words]
        if not pick:
            continue
        e = pick[0]
        times = [ask(e)[0] for _ in range(a.repeat)]
        print(f"| {e['words']} | {1000 * statistics.median(times):.1f} | {ask(e)[1]:,} |")
    e = [x for x in examples if x["words"] >= 20][0]
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(a.threads) as pool:
        lat = list(pool.map(lambda _: ask(e)[0], range(a.concurrent)))
    wall = time.perf_counter() - t
    print(
        f"{a.concurrent} concurrent requests ({e['words']} words) from {a.threads} threads: "
        f"{wall:.2f} s wall, {a.concurrent / wall:.1f} requests/s, "
        f"median latency {1000 * statistics.median(lat):.0f} ms, max {1000 * max(lat):.0f} ms"
    )


if __name__ == "__main__":
    main()
