# Simulates vt_fragments_ldsm (ldmatrix.trans + byte permutes) on a swizzled stage and checks the
# fragments hold V[channel][token] in the k order p8t_k defines; checks p8t_k is a bijection.
import itertools
def p8t_k(t): return (t & ~15) | (((t >> 1) & 3) << 2) | (((t >> 3) & 1) << 1) | (t & 1)
inv = {p8t_k(t): t for t in range(64)}; assert sorted(inv) == list(range(64))
def perm(x, y, s):
    b = x + y
    return [b[(s >> (4 * i)) & 7] for i in range(4)]
for DC, g0s, NB in ((512, (0, 16), 4), (256, (0, 8), 2), (128, (0, 4), 1), (256, (0,), 4), (128, (0,), 2)):
    # stage: latent blocks [DC/128][64 tokens][128 B], byte (T, ch) at (ch>>7)*8192 + T*128 + ((((ch&127)>>4) ^ (T&7))<<4) + (ch&15)
    mem = {}
    val = lambda T, ch: (T * 7919 + ch * 104729) % 251
    for T in range(64):
        for ch in range(DC):
            mem[(ch >> 7) * 8192 + T * 128 + ((((ch & 127) >> 4) ^ (T & 7)) << 4) + (ch & 15)] = (T, ch)
    for g0 in g0s:
        for wiw, ks in itertools.product(range(4), range(2)):
            # per lane row addresses, then the 4 matrices' rows (16 bytes each)
            for mb in range(NB):
                rows = []
                for lane in range(32):
                    r = lane & 7
                    T = 32 * ks + 8 * (lane >> 3) + r
                    cb = 16 * (g0 + 4 * mb + wiw)
                    a = (cb >> 7) * 8192 + T * 128 + ((((cb & 127) >> 4) ^ r) << 4)
                    rows.append([mem[a + i] for i in range(16)])
                for lane in range(32):
                    g, tq = lane // 4, lane % 4
                    X = []
                    for m in range(4):  # .trans: lane gets column g (b16) of rows 2tq, 2tq+1 of matrix m
                        r0, r1 = rows[8 * m + 2 * tq], rows[8 * m + 2 * tq + 1]
                        X.append([r0[2 * g], r0[2 * g + 1], r1[2 * g], r1[2 * g + 1]])
                    fr = [perm(X[0], X[1], 0x6420), perm(X[0], X[1], 0x7531), perm(X[2], X[3], 0x6420), perm(X[2], X[3], 0x7531)]
                    for v2, v1, j in itertools.product(range(2), range(2), range(4)):
                        k = 32 * ks + 16 * v2 + 4 * tq + j
                        want = (inv[k], 16 * (g0 + 4 * mb + wiw) + 2 * g + v1)
                        got = fr[v1 + 2 * v2][j]
                        assert got == want, (DC, g0, wiw, ks, mb, lane, v1, v2, j, got, want)
    print("ok", DC, g0s, NB)
# masks: fragment byte j of half v2 holds token inv[32ks + 16v2 + 4tq + j] = 32ks + 2tq + {0,1,8,9}[j] + 16 v2
for ks, tq, v2, j in itertools.product(range(2), range(4), range(2), range(4)):
    assert inv[32 * ks + 16 * v2 + 4 * tq + j] == 32 * ks + 2 * tq + 16 * v2 + (0, 1, 8, 9)[j]
# store_p8t: thread tq's tokens 8n + 2tq + e go to k = p8t_k(8n + 2tq) + e
for n, tq, e in itertools.product(range(8), range(4), range(2)):
    assert p8t_k(8 * n + 2 * tq) + e == p8t_k(8 * n + 2 * tq + e)
print("masks and P^T order ok")
# vt_fragments_ldsm's two-base addressing equals the direct formula above
for g0, wiw, mb, r in itertools.product((0, 4, 8, 16), range(4), range(8), range(8)):
    cb = 16 * (g0 + 4 * mb + wiw)
    direct = (cb >> 7) * 8192 + ((((cb & 127) >> 4) ^ r) << 4)
    x = g0 + wiw
    base_e = (x >> 3) * 8192 + (((x & 7) ^ r) << 4)
    base_o = (base_e ^ 64) + ((x >> 2) & 1) * 8192
    assert ((base_o if mb & 1 else base_e) + (mb >> 1) * 8192) == direct
print("two-base addresses ok")
