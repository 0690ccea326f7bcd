/* The wasm32 training kernel: one MLP segment step by step, with every float operation fixed.
 *
 * What it computes (docs/browser-worker.md has the rules; kernel.mjs is the same arithmetic in JavaScript):
 * the MLP template (compute/models/mlp.py: Linear, ReLU, ..., Linear), the mean softmax cross-entropy over a
 * batch, its gradient, AdamW (decoupled weight decay, as torch's) with the lr of compute/lr_schedule.py, and
 * the batch of each step drawn from (seed, worker, round, step) alone.
 *
 * Determinism: every float32 operation is one IEEE-754 operation rounded to nearest (WebAssembly's scalar
 * f32 instructions, or one lane of its fixed-width f32x4 ones, which do the same), in a fixed order; every sum
 * runs over its index in ascending order from +0.0f; there is no libc (exp and log are written here with
 * + - * / only), no fused multiply-add (-ffp-contract=off), no relaxed SIMD and no fast-math. Scalars of the schedule and of AdamW's bias corrections are IEEE doubles, each
 * operation rounded once, then rounded once to float32. The same source therefore gives the same bits under
 * any correct compiler and any WebAssembly engine, and kernel.mjs gives them in JavaScript (Math.fround after
 * every operation).
 *
 * Memory: one model per instance. The host allocates with `kernel_alloc`, writes the sizes, the training data
 * and the state into the kernel's memory, and reads the state back (the `*_ptr` exports).
 */

typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;

#define EXPORT(name) __attribute__((export_name(#name)))

#define KERNEL_VERSION 1
#define MAX_LAYERS 16 /* Linear layers */
#define FLT_MIN_NORMAL 1.17549435e-38f
#define CANONICAL_NAN 0x7fc00000u

/* ---- memory: a bump allocator over the instance's linear memory ---------------------------------------- */

extern unsigned char __heap_base;
static u32 heap_top = 0;

EXPORT(kernel_version) u32 kernel_version(void) { return KERNEL_VERSION; }

/* `bytes` of zeroed memory aligned to 16, or 0 when memory cannot grow. */
EXPORT(kernel_alloc) u32 kernel_alloc(u32 bytes) {
    if (heap_top == 0) heap_top = (u32)&__heap_base;
    u32 start = (heap_top + 15u) & ~15u;
    u32 end = start + bytes;
    if (end < start) return 0;
    u32 have = (u32)__builtin_wasm_memory_size(0) * 65536u;
    if (end > have) {
        u32 pages = (end - have + 65535u) / 65536u;
        if (__builtin_wasm_memory_grow(0, pages) == (unsigned long)-1) return 0;
    }
    heap_top = end;
    unsigned char *p = (unsigned char *)start;
    for (u32 i = 0; i < bytes; i++) p[i] = 0;
    return start;
}

/* ---- float32 exp and log from + - * / alone ------------------------------------------------------------ */

static float bits_to_float(u32 bits) { return __builtin_bit_cast(float, bits); }
static u32 float_to_bits(float value) { return __builtin_bit_cast(u32, value); }

/* e^x for x <= 0 (softmax shifts its inputs so): x < -86 gives 0, and x > 0 is taken as 0 (never asked). */
EXPORT(kernel_exp) float kernel_exp(float x) {
    if (!(x <= 0.0f)) x = 0.0f; /* NaN too */
    if (x < -86.0f) return 0.0f;
    float n = __builtin_floorf(x * 1.44269502f + 0.5f); /* nearest integer to x / ln 2 */
    float r = x - n * 0.693145752f;                     /* ln 2 in two parts: n * hi is exact */
    r = r - n * 1.42860677e-06f;
    /* e^r on |r| <= 0.35: Taylor to r^7 by Horner */
    float p = 1.98412701e-04f;
    p = p * r + 1.38888892e-03f;
    p = p * r + 8.33333377e-03f;
    p = p * r + 4.16666679e-02f;
    p = p * r + 1.66666672e-01f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    i32 exponent = (i32)n; /* in [-124, 0]: 2^n is a normal float */
    return p * bits_to_float((u32)(exponent + 127) << 23);
}

/* The natural log of a positive normal float (softmax takes it of a sum >= 1); 0 for anything else. */
EXPORT(kernel_log) float kernel_log(float x) {
    if (!(x >= FLT_MIN_NORMAL) || x > 3.40282347e+38f) return 0.0f;
    u32 bits = float_to_bits(x);
    i32 exponent = (i32)(bits >> 23) - 127;
    float m = bits_to_float((bits & 0x007fffffu) | 0x3f800000u); /* x = m 2^exponent, m in [1, 2) */
    if (m > 1.41421354f) {
        m = m * 0.5f;
        exponent += 1;
    }
    float f = m - 1.0f;          /* in [-0.293, 0.415) */
    float s = f / (2.0f + f);    /* log m = 2 atanh s, |s| < 0.172 */
    float s2 = s * s;
    float q = 1.11111112e-01f;   /* 1/9 */
    q = q * s2 + 1.42857149e-01f;
    q = q * s2 + 2.00000003e-01f;
    q = q * s2 + 3.33333343e-01f;
    q = q * s2 + 1.0f;
    float log_m = 2.0f * s * q;
    float e = (float)exponent;
    return e * 0.693145752f + (e * 1.42860677e-06f + log_m);
}

/* ---- the learning-rate schedule (compute/lr_schedule.py, the same doubles) ------------------------------ */

/* (-1)^k / (2k)! as Python rounds it, k = 0..13 (lr_schedule._COSINE_COEFFICIENTS). */
static const double COSINE_COEFFICIENTS[14] = {
    1.0, -0.5, 0.041666666666666664, -0.001388888888888889, 2.48015873015873e-05, -2.755731922398589e-07,
    2.08767569878681e-09, -1.1470745597729725e-11, 4.779477332387385e-14, -1.5619206968586225e-16,
    4.110317623312165e-19, -8.896791392450574e-22, 1.6117375710961184e-24, -2.4795962632247976e-27,
};
#define PI 3.141592653589793

static double half_cosine(double progress) {
    double x = PI * progress / 2.0;
    double x_squared = x * x;
    double cosine = 0.0;
    for (i32 k = 13; k >= 0; k--) cosine = cosine * x_squared + COSINE_COEFFICIENTS[k];
    return cosine * cosine;
}

enum { SCHEDULE_CONSTANT = 0, SCHEDULE_LINEAR = 1, SCHEDULE_COSINE = 2 };

static struct {
    double lr, final_lr;
    u32 kind;
    u64 warmup, rounds, inner_steps;
} schedule;

EXPORT(set_schedule) void set_schedule(double lr, u32 kind, u64 warmup, double final_lr, u64 rounds, u64 inner_steps) {
    schedule.lr = lr;
    schedule.kind = kind;
    schedule.warmup = warmup;
    schedule.final_lr = final_lr;
    schedule.rounds = rounds;
    schedule.inner_steps = inner_steps;
}

/* The lr of inner step `step` of round `round` (lr_schedule.inner_lr). Integers stay below 2^53. */
EXPORT(inner_lr) double inner_lr(u64 round, u64 step) {
    double peak = schedule.lr;
    long long progress_step = (long long)(round * schedule.inner_steps + step);
    long long warmup = (long long)schedule.warmup;
    if (progress_step < warmup) return peak * (double)(progress_step + 1) / (double)warmup;
    if (schedule.kind == SCHEDULE_CONSTANT) return peak;
    long long decay_steps = (long long)(schedule.rounds * schedule.inner_steps) - 1 - warmup;
    double progress = 1.0;
    if (decay_steps > 0) {
        progress = (double)(progress_step - warmup) / (double)decay_steps;
        if (progress > 1.0) progress = 1.0;
    }
    double final = schedule.final_lr;
    if (schedule.kind == SCHEDULE_LINEAR) return final + (peak - final) * (1.0 - progress);
    return final + (peak - final) * half_cosine(progress);
}

/* ---- the batch order: (seed, worker, round, step) -> sample indices ------------------------------------ */

#define GOLDEN 0x9e3779b97f4a7c15ull
#define BATCH_DOMAIN 0x74726f6c6c797731ull /* "trollyw1" */

static u64 mix64(u64 z) { /* splitmix64's finalizer: a bijection of the 64-bit integers */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static u64 stream_seed, stream_worker, stream_round;

EXPORT(set_stream) void set_stream(u64 seed, u64 worker, u64 round) {
    stream_seed = seed;
    stream_worker = worker;
    stream_round = round;
}

static u64 step_key(u64 step) {
    u64 key = BATCH_DOMAIN;
    key = mix64((key ^ stream_seed) + GOLDEN);
    key = mix64((key ^ stream_worker) + GOLDEN);
    key = mix64((key ^ stream_round) + GOLDEN);
    return mix64((key ^ step) + GOLDEN);
}

/* Index i of the batch of `step`: uniform over [0, count) with replacement. */
static u32 batch_index(u64 key, u32 i, u32 count) {
    u64 r = mix64(key + (u64)(i + 1) * GOLDEN);
    return (u32)(((r >> 32) * (u64)count) >> 32);
}

/* ---- the model ----------------------------------------------------------------------------------------- */

static struct {
    u32 layers;                 /* Linear layers */
    u32 sizes[MAX_LAYERS + 1];  /* features in, hidden..., classes */
    u32 batch;
    u32 params;                 /* float count: per layer, weight [out][in] then bias [out] */
    float *weights, *grads, *exp_avg, *exp_avg_sq;
    float *activations[MAX_LAYERS + 1]; /* [batch][sizes[l]]: the input, each hidden ReLU output, the logits */
    float *delta, *delta_next;          /* [batch][widest]: the loss's gradient at a layer's output */
    u32 batch_lanes;                    /* the batch rounded up to a multiple of 4 */
    float *transposed;                  /* [widest][batch_lanes]: a layer's input or delta, transposed */
    float *block;                       /* [batch][16]: the columns a gradient tile sums over */
    u32 *indices, *targets;             /* the batch's sample indices and classes */
    float *data_inputs;                 /* [count][sizes[0]] */
    u32 *data_targets;
    u32 data_count;
    u32 adam_step;
    double beta1, beta2, eps, weight_decay;
    float *losses;                      /* [batch] per-sample losses of the last step */
} model;

enum { OK = 0, BAD_SHAPE = 1, NO_MEMORY = 2, NO_DATA = 3, BAD_TARGET = 4 };

/* The model of `layers` Linear layers with sizes[0..layers] at `sizes_ptr` (u32), trained on batches of
 * `batch`. Once per instance; 0 or an error code. */
EXPORT(configure) u32 configure(u32 layers, u32 sizes_ptr, u32 batch) {
    if (model.layers != 0 || layers < 1 || layers > MAX_LAYERS || batch < 1 || batch > 65536) return BAD_SHAPE;
    const u32 *sizes = (const u32 *)sizes_ptr;
    u32 params = 0, widest = 0;
    for (u32 l = 0; l <= layers; l++) {
        if (sizes[l] < 1 || sizes[l] > 65536) return BAD_SHAPE;
        model.sizes[l] = sizes[l];
        if (sizes[l] > widest) widest = sizes[l];
    }
    if ((u64)batch * widest > 0x08000000u) return BAD_SHAPE;
    for (u32 l = 0; l < layers; l++) {
        u64 count = (u64)params + (u64)sizes[l + 1] * (sizes[l] + 1);
        if (count > 0x08000000u) return BAD_SHAPE; /* 2^27 floats: each buffer under 512 MiB */
        params = (u32)count;
    }
    model.layers = layers;
    model.batch = batch;
    model.params = params;
    model.weights = (float *)kernel_alloc(params * 4u);
    model.grads = (float *)kernel_alloc(params * 4u);
    model.exp_avg = (float *)kernel_alloc(params * 4u);
    model.exp_avg_sq = (float *)kernel_alloc(params * 4u);
    for (u32 l = 0; l <= layers; l++) model.activations[l] = (float *)kernel_alloc(batch * sizes[l] * 4u);
    model.delta = (float *)kernel_alloc(batch * widest * 4u);
    model.delta_next = (float *)kernel_alloc(batch * widest * 4u);
    model.batch_lanes = (batch + 3u) & ~3u;
    model.transposed = (float *)kernel_alloc(model.batch_lanes * widest * 4u);
    model.block = (float *)kernel_alloc(batch * 16u * 4u);
    model.indices = (u32 *)kernel_alloc(batch * 4u);
    model.targets = (u32 *)kernel_alloc(batch * 4u);
    model.losses = (float *)kernel_alloc(batch * 4u);
    if (!model.weights || !model.grads || !model.exp_avg || !model.exp_avg_sq || !model.delta ||
        !model.delta_next || !model.transposed || !model.block ||
        !model.indices || !model.targets || !model.losses) return NO_MEMORY;
    for (u32 l = 0; l <= layers; l++) if (!model.activations[l]) return NO_MEMORY;
    return OK;
}

EXPORT(param_count) u32 param_count(void) { return model.params; }
EXPORT(weights_ptr) u32 weights_ptr(void) { return (u32)model.weights; }
EXPORT(exp_avg_ptr) u32 exp_avg_ptr(void) { return (u32)model.exp_avg; }
EXPORT(exp_avg_sq_ptr) u32 exp_avg_sq_ptr(void) { return (u32)model.exp_avg_sq; }
EXPORT(indices_ptr) u32 indices_ptr(void) { return (u32)model.indices; }
EXPORT(adam_step) u32 adam_step(void) { return model.adam_step; }
EXPORT(set_adam_step) void set_adam_step(u32 step) { model.adam_step = step; }

/* The training split: `count` samples of sizes[0] float32 features at `inputs_ptr`, their classes (u32) at
 * `targets_ptr`; 0, or BAD_TARGET when a class is outside the model's outputs. */
EXPORT(set_data) u32 set_data(u32 inputs_ptr, u32 targets_ptr, u32 count) {
    if (model.layers == 0 || count < 1) return NO_DATA;
    u32 *targets = (u32 *)targets_ptr;
    for (u32 i = 0; i < count; i++) if (targets[i] >= model.sizes[model.layers]) return BAD_TARGET;
    model.data_inputs = (float *)inputs_ptr;
    model.data_targets = targets;
    model.data_count = count;
    return OK;
}

EXPORT(set_optimizer) void set_optimizer(double beta1, double beta2, double eps, double weight_decay) {
    model.beta1 = beta1;
    model.beta2 = beta2;
    model.eps = eps;
    model.weight_decay = weight_decay;
}

/* Fill the batch of `step` (indices, inputs, classes) from the stream set by `set_stream`. */
EXPORT(draw_batch) u32 draw_batch(u64 step) {
    if (model.data_count == 0) return NO_DATA;
    u64 key = step_key(step);
    u32 features = model.sizes[0];
    float *x = model.activations[0];
    for (u32 b = 0; b < model.batch; b++) {
        u32 index = batch_index(key, b, model.data_count);
        model.indices[b] = index;
        model.targets[b] = model.data_targets[index];
        const float *row = model.data_inputs + (u64)index * features;
        for (u32 i = 0; i < features; i++) x[b * features + i] = row[i];
    }
    return OK;
}

static u32 layer_offset(u32 layer) {
    u32 offset = 0;
    for (u32 l = 0; l < layer; l++) offset += model.sizes[l + 1] * (model.sizes[l] + 1);
    return offset;
}

/* ---- the matrix products, four lanes at a time --------------------------------------------------------
 * WebAssembly's fixed-width SIMD (f32x4 add, mul and compare; never relaxed SIMD) does in each lane exactly the
 * scalar f32 operation. So four independent sums may run side by side, one per lane, as long as each sum's own
 * sequence of operations is the scalar one (docs/browser-worker.md rule 3): lanes run over batch rows (the
 * forward pass, on a transposed copy of the layer's input) or over the inputs of a row (the gradients), never
 * across the terms of one sum. Edges that do not fill four lanes run the same sums one element at a time. */

typedef float f32x4 __attribute__((vector_size(16), aligned(4), __may_alias__));
typedef i32 i32x4 __attribute__((vector_size(16), aligned(4), __may_alias__));

static f32x4 splat(float value) { return (f32x4){value, value, value, value}; }
static f32x4 load4(const float *at) { return *(const f32x4 *)at; }
static void store4(float *at, f32x4 value) { *(f32x4 *)at = value; }
/* value where keep > 0, else +0.0 (as the scalar `keep > 0.0f ? value : 0.0f`; NaN > 0 is false) */
static f32x4 where_positive(f32x4 keep, f32x4 value) {
    return (f32x4)((i32x4)value & (i32x4)(keep > splat(0.0f)));
}

/* rows[b][k] (a layer's input, or delta) transposed: t[k][b], each row `batch_lanes` long, the lanes past the
 * batch 0 (their sums are never stored). One buffer: the forward pass uses it for its input, then the backward
 * pass for delta. */
static const float *transposed(const float *rows, u32 width) {
    u32 lanes = model.batch_lanes;
    float *t = model.transposed;
    for (u32 k = 0; k < width; k++)
        for (u32 b = 0; b < lanes; b++) t[k * lanes + b] = b < model.batch ? rows[b * width + k] : 0.0f;
    return t;
}

/* out[b][o] = (sum over i ascending of W[o][i] x[b][i]) + bias[o], then ReLU unless it is the last layer:
 * stores the four batch rows b0.. of `sum` (the sums from +0.0) that exist. */
static void store_outputs(float *y, u32 out, u32 b0, u32 o, f32x4 sum, float bias, int relu) {
    f32x4 value = sum + splat(bias);
    if (relu) value = where_positive(value, value);
    for (u32 lane = 0; lane < 4 && b0 + lane < model.batch; lane++) y[(b0 + lane) * out + o] = value[lane];
}

/* Four outputs (rows w of W) for eight batch rows (xt's columns b0..b0+7): eight sums side by side. */
static void forward_tile(float *y, u32 in, u32 out, const float *w, const float *bias, const float *xt, u32 b0,
                         u32 o, int relu) {
    u32 lanes = model.batch_lanes;
    const float *w0 = w + o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in, *x = xt + b0;
    f32x4 a0 = splat(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (u32 i = 0; i < in; i++) {
        f32x4 x0 = load4(x + i * lanes), x1 = load4(x + i * lanes + 4);
        f32x4 s0 = splat(w0[i]), s1 = splat(w1[i]), s2 = splat(w2[i]), s3 = splat(w3[i]);
        a0 = a0 + s0 * x0;
        a1 = a1 + s0 * x1;
        a2 = a2 + s1 * x0;
        a3 = a3 + s1 * x1;
        a4 = a4 + s2 * x0;
        a5 = a5 + s2 * x1;
        a6 = a6 + s3 * x0;
        a7 = a7 + s3 * x1;
    }
    f32x4 sums[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    for (u32 k = 0; k < 8; k++) store_outputs(y, out, b0 + 4 * (k & 1), o + k / 2, sums[k], bias[o + k / 2], relu);
}

/* One output for four batch rows: the edges of forward_tile's grid. */
static void forward_single(float *y, u32 in, u32 out, const float *w, const float *bias, const float *xt, u32 b0,
                           u32 o, int relu) {
    u32 lanes = model.batch_lanes;
    const float *wo = w + o * in, *x = xt + b0;
    f32x4 acc = splat(0.0f);
    for (u32 i = 0; i < in; i++) acc = acc + splat(wo[i]) * load4(x + i * lanes);
    store_outputs(y, out, b0, o, acc, bias[o], relu);
}

static void forward_layer(u32 layer) {
    u32 in = model.sizes[layer], out = model.sizes[layer + 1], lanes = model.batch_lanes;
    const float *w = model.weights + layer_offset(layer), *bias = w + out * in;
    const float *xt = transposed(model.activations[layer], in);
    float *y = model.activations[layer + 1];
    int relu = layer + 1 < model.layers;
    u32 b0 = 0, quads = out & ~3u;
    for (; b0 + 8 <= lanes; b0 += 8)
        for (u32 o = 0; o < quads; o += 4) forward_tile(y, in, out, w, bias, xt, b0, o, relu);
    for (u32 b = b0; b < lanes; b += 4)
        for (u32 o = 0; o < quads; o++) forward_single(y, in, out, w, bias, xt, b, o, relu);
    for (u32 b = 0; b < lanes; b += 4)
        for (u32 o = quads; o < out; o++) forward_single(y, in, out, w, bias, xt, b, o, relu);
}

/* The batch's mean cross-entropy; delta = its gradient at the logits, (softmax - onehot) / batch. */
static float softmax_cross_entropy(void) {
    u32 classes = model.sizes[model.layers];
    const float *z = model.activations[model.layers];
    float total = 0.0f, batch = (float)model.batch;
    for (u32 b = 0; b < model.batch; b++) {
        const float *zb = z + b * classes;
        float *db = model.delta + b * classes;
        float top = zb[0];
        for (u32 j = 1; j < classes; j++) if (zb[j] > top) top = zb[j];
        float sum = 0.0f;
        for (u32 j = 0; j < classes; j++) {
            db[j] = kernel_exp(zb[j] - top);
            sum = sum + db[j];
        }
        u32 target = model.targets[b];
        float loss = kernel_log(sum) - (zb[target] - top);
        model.losses[b] = loss;
        total = total + loss;
        for (u32 j = 0; j < classes; j++) {
            float p = db[j] / sum;
            db[j] = (j == target ? p - 1.0f : p) / batch;
        }
    }
    /* A NaN loss is the one NaN too: a verifier's vote digests the losses' bits (verifier/evidence.py), and which
     * NaN an engine's instructions produce is theirs to choose (the SIMD products differ from the scalar ones). */
    float mean = total / batch;
    return mean == mean ? mean : bits_to_float(CANONICAL_NAN);
}

/* Gradients of one layer from delta (its output's gradient): dW[o][i] = sum over b ascending of
 * delta[b][o] x[b][i], dbias[o] = sum over b ascending of delta[b][o]; then, below the first layer,
 * delta_next[b][i] = (sum over o ascending of W[o][i] delta[b][o]) where the input's ReLU passed (x > 0), else 0.
 * Every sum starts from +0.0. Lanes run over i, sixteen at a time (the rest one by one); delta is read
 * transposed (dt[o][b]) and the sixteen columns of x or of delta_next being summed are kept in a contiguous
 * block (`block`, [batch][16]): rows a layer apart would all fall in the same few cache sets. */
static void weight_gradient_tile(float *go, const float *block, const float *dto) {
    f32x4 g0 = splat(0.0f), g1 = g0, g2 = g0, g3 = g0;
    for (u32 b = 0; b < model.batch; b++) {
        const float *xb = block + 16 * b;
        f32x4 s = splat(dto[b]);
        g0 = g0 + s * load4(xb);
        g1 = g1 + s * load4(xb + 4);
        g2 = g2 + s * load4(xb + 8);
        g3 = g3 + s * load4(xb + 12);
    }
    store4(go, g0);
    store4(go + 4, g1);
    store4(go + 8, g2);
    store4(go + 12, g3);
}

static void weight_gradients(u32 in, u32 out, float *gw, float *gbias, const float *x, const float *dt) {
    u32 lanes = model.batch_lanes, i = 0;
    float *block = model.block;
    for (; i + 16 <= in; i += 16) {
        for (u32 b = 0; b < model.batch; b++)
            for (u32 k = 0; k < 16; k++) block[16 * b + k] = x[b * in + i + k];
        for (u32 o = 0; o < out; o++) weight_gradient_tile(gw + o * in + i, block, dt + o * lanes);
    }
    for (; i < in; i++)
        for (u32 o = 0; o < out; o++) {
            float g = 0.0f;
            for (u32 b = 0; b < model.batch; b++) g = g + dt[o * lanes + b] * x[b * in + i];
            gw[o * in + i] = g;
        }
    for (u32 o = 0; o < out; o++) {
        float g = 0.0f;
        for (u32 b = 0; b < model.batch; b++) g = g + dt[o * lanes + b];
        gbias[o] = g;
    }
}

/* Adds W[o][i..i+15] delta[b][o] to the block's row b, for every b. */
static void input_gradient_row(float *block, const float *wo, const float *dto) {
    f32x4 w0 = load4(wo), w1 = load4(wo + 4), w2 = load4(wo + 8), w3 = load4(wo + 12);
    for (u32 b = 0; b < model.batch; b++) {
        float *nb = block + 16 * b;
        f32x4 s = splat(dto[b]);
        store4(nb, load4(nb) + w0 * s);
        store4(nb + 4, load4(nb + 4) + w1 * s);
        store4(nb + 8, load4(nb + 8) + w2 * s);
        store4(nb + 12, load4(nb + 12) + w3 * s);
    }
}

static void input_gradients(u32 in, u32 out, const float *w, const float *x, const float *dt) {
    u32 lanes = model.batch_lanes, i = 0;
    float *block = model.block, *next = model.delta_next;
    for (; i + 16 <= in; i += 16) {
        for (u32 k = 0; k < 16 * model.batch; k++) block[k] = 0.0f;
        for (u32 o = 0; o < out; o++) input_gradient_row(block, w + o * in + i, dt + o * lanes);
        for (u32 b = 0; b < model.batch; b++)
            for (u32 k = 0; k < 16; k += 4)
                store4(next + b * in + i + k, where_positive(load4(x + b * in + i + k), load4(block + 16 * b + k)));
    }
    for (; i < in; i++)
        for (u32 b = 0; b < model.batch; b++) {
            float n = 0.0f;
            for (u32 o = 0; o < out; o++) n = n + w[o * in + i] * dt[o * lanes + b];
            next[b * in + i] = x[b * in + i] > 0.0f ? n : 0.0f;
        }
}

static void backward_layer(u32 layer) {
    u32 in = model.sizes[layer], out = model.sizes[layer + 1];
    u32 offset = layer_offset(layer);
    float *gw = model.grads + offset;
    const float *dt = transposed(model.delta, out);
    weight_gradients(in, out, gw, gw + out * in, model.activations[layer], dt);
    if (layer == 0) return;
    input_gradients(in, out, model.weights + offset, model.activations[layer], dt);
    float *swap = model.delta;
    model.delta = model.delta_next;
    model.delta_next = swap;
}

static double power(double base, u32 exponent) { /* by squaring: a fixed sequence of double products */
    double result = 1.0;
    while (exponent) {
        if (exponent & 1u) result = result * base;
        base = base * base;
        exponent >>= 1;
    }
    return result;
}

/* One AdamW step at `lr` (torch's AdamW: decoupled decay of every parameter, bias corrections). Moments that
 * fall below the smallest normal float are flushed to +0 (as the CPU profile's FTZ does, and for speed). */
static void adamw(double lr) {
    model.adam_step += 1;
    double correction1 = 1.0 - power(model.beta1, model.adam_step);
    double correction2 = 1.0 - power(model.beta2, model.adam_step);
    float decay = (float)(1.0 - lr * model.weight_decay);
    float beta1 = (float)model.beta1, rest1 = (float)(1.0 - model.beta1);
    float beta2 = (float)model.beta2, rest2 = (float)(1.0 - model.beta2);
    float step_size = (float)(lr / correction1);
    float correction2_sqrt = (float)__builtin_sqrt(correction2);
    float eps = (float)model.eps;
    float *p = model.weights, *m = model.exp_avg, *v = model.exp_avg_sq;
    const float *g = model.grads;
    for (u32 k = 0; k < model.params; k++) {
        float grad = g[k];
        float mk = beta1 * m[k] + rest1 * grad;
        float vk = beta2 * v[k] + rest2 * (grad * grad);
        if (__builtin_fabsf(mk) < FLT_MIN_NORMAL) mk = 0.0f;
        if (vk < FLT_MIN_NORMAL) vk = 0.0f;
        float denom = __builtin_sqrtf(vk) / correction2_sqrt + eps;
        float pk = p[k] * decay - (step_size * mk) / denom;
        /* A NaN's payload bits are the one thing WebAssembly leaves open: a diverged state keeps the one NaN. */
        p[k] = pk == pk ? pk : bits_to_float(CANONICAL_NAN);
        m[k] = mk == mk ? mk : bits_to_float(CANONICAL_NAN);
        v[k] = vk == vk ? vk : bits_to_float(CANONICAL_NAN);
    }
}

/* Inner step `step` of the stream's round: its batch, forward, backward, AdamW at the schedule's lr. Returns
 * the batch's mean loss (NaN when the model or data is missing). */
EXPORT(train_step) float train_step(u64 step) {
    if (draw_batch(step) != OK || model.layers == 0) return __builtin_nanf("");
    for (u32 l = 0; l < model.layers; l++) forward_layer(l);
    float loss = softmax_cross_entropy();
    for (u32 l = model.layers; l-- > 0;) backward_layer(l);
    adamw(inner_lr(stream_round, step));
    return loss;
}
