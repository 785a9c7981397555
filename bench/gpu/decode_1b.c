/* bench_gpu_decode_1b: decode tokens/s of a 1B-class diff-v1 model with
 * random bf16 weights on the CUDA backend, as a fraction of the HBM
 * roofline (issue 6).
 *
 * The model: HF DiffLlama layout (model_type "diffllama"), the shape of
 * Llama-3.2-1B: hidden 2048, 16 layers, 32 attention sub-heads of 64
 * (16 diff-heads, dk = 64, dv = 128), 8 kv sub-heads (4 groups, m = 2), FFN
 * 8192, vocabulary 128256, tied embeddings: 1.24e9 parameters, 2.47 GB in
 * bf16. The checkpoint is written once to DIR (default /tmp/diffrt_1b):
 * config.json + model.safetensors whose matrices are windows at random
 * offsets into one pool of uniform bf16 values (+-0.02), so writing it takes
 * seconds, not minutes; timings do not depend on the values.
 *
 * Then: a session on "cuda" (default precision f32: the decode matmuls are
 * the bf16-weight GEMV, exact f32 math, in both modes), a prompt of P random
 * tokens, and N greedy decode steps, each timed (drt_session_forward of one
 * token: upload the id, one CUDA-graph launch after the second step,
 * download the logits). Reported: the median step time and tokens/s.
 *
 * Roofline: a decode step must read every weight once. weight bytes / the
 * device's measured copy bandwidth (cudaMemcpy device-to-device of 1 GiB,
 * read + write bytes) is the fastest a step can be; tokens/s divided by its
 * inverse is the fraction reported.
 *
 *   bench_gpu_decode_1b [--dir DIR] [--prompt P] [--tokens N] [--json FILE] [--backend B]
 * (--backend cpu checks the checkpoint and the loop on a machine without a GPU.) */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "diffrt/diffrt.h"
#include "drt_half.h"
#include "drt_util.h"
#include "safetensors.h"

enum { D = 2048, F = 8192, L = 16, NQ = 32, NKV = 8, HD = 64, V = 128256 };

static const char *CONFIG = "{\n"
                            "  \"model_type\": \"diffllama\",\n"
                            "  \"architectures\": [\"DiffLlamaForCausalLM\"],\n"
                            "  \"hidden_size\": 2048,\n"
                            "  \"intermediate_size\": 8192,\n"
                            "  \"num_hidden_layers\": 16,\n"
                            "  \"num_attention_heads\": 32,\n"
                            "  \"num_key_value_heads\": 8,\n"
                            "  \"head_dim\": 64,\n"
                            "  \"vocab_size\": 128256,\n"
                            "  \"max_position_embeddings\": 8192,\n"
                            "  \"rope_theta\": 500000.0,\n"
                            "  \"rms_norm_eps\": 1e-05,\n"
                            "  \"hidden_act\": \"silu\",\n"
                            "  \"tie_word_embeddings\": true,\n"
                            "  \"torch_dtype\": \"bfloat16\"\n"
                            "}\n";

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int file_has(const char *path, const char *text) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = strlen(text);
    char *b = malloc(n + 2);
    size_t got = b ? fread(b, 1, n + 1, f) : 0;
    fclose(f);
    int same = b && got == n && memcmp(b, text, n) == 0;
    free(b);
    return same;
}

#define MAX_T (4 + L * 13)

typedef struct {
    drt_st_write_tensor t[MAX_T];
    char names[MAX_T][96];
    int n;
} tensor_list;

static void add(tensor_list *tl, const char *name, int nd, int64_t n0, int64_t n1, const void *data) {
    drt_st_write_tensor *w = &tl->t[tl->n];
    snprintf(tl->names[tl->n], sizeof tl->names[0], "%s", name);
    w->name = tl->names[tl->n];
    w->dtype = DRT_BF16;
    w->ndim = nd;
    w->shape[0] = n0;
    w->shape[1] = n1;
    w->data = data;
    tl->n++;
}

/* config.json + model.safetensors in dir, unless an identical config is there */
static int write_checkpoint(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char st_path[1024];
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    struct stat sb;
    if (file_has(path, CONFIG) && stat(st_path, &sb) == 0 && sb.st_size > ((off_t)2 << 30)) {
        printf("checkpoint: reusing %s\n", dir);
        return 0;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    double t0 = drt_now_s();
    /* one pool of random bf16 values; every matrix is a window into it */
    const int64_t big = (int64_t)V * D, pool_n = 2 * big;
    uint16_t *pool = malloc(sizeof(uint16_t) * (size_t)pool_n);
    uint16_t *ones = malloc(sizeof(uint16_t) * (size_t)F);
    uint16_t *small = malloc(sizeof(uint16_t) * (size_t)HD * 4 * L);
    if (!pool || !ones || !small) {
        fprintf(stderr, "out of memory for the checkpoint\n");
        return 1;
    }
    uint64_t seed = 42;
    for (int64_t i = 0; i < pool_n; i += 4) {
        uint64_t r = drt_splitmix64(&seed);
        for (int j = 0; j < 4 && i + j < pool_n; j++) {
            double u = (double)((r >> (16 * j)) & 0xffff) / 65535.0;
            pool[i + j] = drt_f32_to_bf16((float)((2 * u - 1) * 0.02));
        }
    }
    for (int i = 0; i < F; i++) ones[i] = drt_f32_to_bf16(1.0f);
    for (int i = 0; i < HD * 4 * L; i++)
        small[i] = drt_f32_to_bf16((float)(((drt_splitmix64(&seed) >> 11) * 0x1.0p-53 * 2 - 1) * 0.1));
#define WIN(n) (pool + (int64_t)(drt_splitmix64(&seed) % (uint64_t)(pool_n - (n) + 1)))
    static tensor_list tl;
    tl.n = 0;
    char nm[96];
    add(&tl, "model.embed_tokens.weight", 2, V, D, WIN(big));
    add(&tl, "model.norm.weight", 1, D, 0, ones);
    for (int l = 0; l < L; l++) {
        static const char *lam[4] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"};
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        add(&tl, nm, 1, D, 0, ones);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        add(&tl, nm, 1, D, 0, ones);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", l);
        add(&tl, nm, 2, NQ * HD, D, WIN((int64_t)NQ * HD * D));
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.weight", l);
        add(&tl, nm, 2, NKV * HD, D, WIN((int64_t)NKV * HD * D));
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.weight", l);
        add(&tl, nm, 2, NKV * HD, D, WIN((int64_t)NKV * HD * D));
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.o_proj.weight", l);
        add(&tl, nm, 2, D, NQ * HD, WIN((int64_t)D * NQ * HD));
        for (int i = 0; i < 4; i++) {
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.%s", l, lam[i]);
            add(&tl, nm, 1, HD, 0, small + (l * 4 + i) * HD);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l);
        add(&tl, nm, 2, F, D, WIN((int64_t)F * D));
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l);
        add(&tl, nm, 2, F, D, WIN((int64_t)F * D));
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        add(&tl, nm, 2, D, F, WIN((int64_t)D * F));
    }
#undef WIN
    drt_status s = drt_st_write(st_path, tl.t, tl.n);
    free(pool);
    free(ones);
    free(small);
    if (s != DRT_OK) {
        fprintf(stderr, "%s\n", drt_last_error());
        return 1;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fputs(CONFIG, f) < 0) {
        perror(path);
        return 1;
    }
    fclose(f);
    printf("checkpoint: wrote %s in %.1f s\n", dir, drt_now_s() - t0);
    return 0;
}

/* device-to-device copy bandwidth, bytes read + written per second */
static double copy_bandwidth(void) {
    const size_t n = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) return 0;
    cudaMemset(a, 1, n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = 0;
    for (int rep = 0; rep < 6; rep++) {
        cudaEventRecord(e0, 0);
        for (int i = 0; i < 4; i++) cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        double bw = 2.0 * 4 * (double)n / (ms * 1e-3);
        if (rep > 0 && bw > best) best = bw; /* first round: warm-up */
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return best;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/diffrt_1b", *json = NULL, *backend = "cuda";
    int P = 16, N = 128;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc)
            P = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
            N = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            backend = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gpu_decode_1b [--dir DIR] [--prompt P] [--tokens N] [--json FILE] "
                            "[--backend B]\n");
            return 2;
        }
    }
    if (P < 1 || N < 8) {
        fprintf(stderr, "bench_gpu_decode_1b: need --prompt >= 1 and --tokens >= 8\n");
        return 2;
    }
    if (write_checkpoint(dir)) return 1;

    drt_model *m = NULL;
    drt_session *s = NULL;
    double t0 = drt_now_s();
    if (drt_model_load(dir, &m) != DRT_OK) {
        fprintf(stderr, "load: %s\n", drt_last_error());
        return 1;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session_opts so = {.backend = backend, .max_ctx = P + N + 1};
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        fprintf(stderr, "session: %s\n", drt_last_error());
        return 1;
    }
    printf("model: %s, %lld parameters, loaded and uploaded in %.1f s\n", I.arch_name, (long long)I.n_params,
           drt_now_s() - t0);

    /* bytes a decode step must read: every layer matrix, the norms (f32 on
     * the device), the LM head (= the embedding, tied) */
    const double layer_w = 2.0 * ((double)NQ * HD * D + 2.0 * NKV * HD * D + (double)D * NQ * HD + 3.0 * F * D);
    const double weight_bytes = L * (layer_w + 2.0 * D * 4) + 2.0 * V * D + D * 4.0;

    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)P);
    double *step = malloc(sizeof(double) * (size_t)N);
    if (!logits || !prompt || !step) return 1;
    uint64_t seed = 7;
    for (int i = 0; i < P; i++) prompt[i] = (int32_t)(drt_splitmix64(&seed) % V);
    t0 = drt_now_s();
    if (drt_session_forward(s, prompt, P, logits, 0) != DRT_OK) {
        fprintf(stderr, "prefill: %s\n", drt_last_error());
        return 1;
    }
    const double prefill_s = drt_now_s() - t0;
    for (int i = 0; i < N; i++) {
        int32_t best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        double a = drt_now_s();
        if (drt_session_forward(s, &best, 1, logits, 0) != DRT_OK) {
            fprintf(stderr, "decode step %d: %s\n", i, drt_last_error());
            return 1;
        }
        step[i] = drt_now_s() - a;
    }
    char fb[512];
    int fallbacks = drt_session_fallbacks(s, fb, sizeof fb);
    /* steps 0 and 1 run eagerly and capture the graph: not steady state */
    qsort(step + 2, (size_t)(N - 2), sizeof(double), cmp_d);
    const double med = step[2 + (N - 2) / 2];
    const double bw = copy_bandwidth();
    const double roof_tps = bw > 0 ? bw / weight_bytes : 0;
    const double tps = 1.0 / med;

    printf("prefill %d tokens: %.1f ms\n", P, prefill_s * 1e3);
    printf("decode: median step %.3f ms over %d steps -> %.1f tokens/s (positions %d..%d)\n", med * 1e3, N - 2, tps,
           P + 2, P + N - 1);
    printf("weights read per step: %.3f GB; measured copy bandwidth %.1f GB/s -> roofline %.1f tokens/s\n",
           weight_bytes * 1e-9, bw * 1e-9, roof_tps);
    printf("fraction of the HBM roofline: %.1f%%\n", roof_tps > 0 ? 100 * tps / roof_tps : 0);
    printf("CPU fallbacks: %d%s%s\n", fallbacks, fallbacks ? " " : "", fallbacks ? fb : "");

    if (json) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "model", "diffllama 1B-class, random bf16 weights");
        cJSON_AddStringToObject(r, "dir", dir);
        cJSON_AddNumberToObject(r, "n_params", (double)I.n_params);
        cJSON_AddNumberToObject(r, "prompt_tokens", P);
        cJSON_AddNumberToObject(r, "decode_steps_timed", N - 2);
        cJSON_AddNumberToObject(r, "prefill_s", prefill_s);
        cJSON_AddNumberToObject(r, "decode_median_step_s", med);
        cJSON_AddNumberToObject(r, "decode_tokens_per_s", tps);
        cJSON_AddNumberToObject(r, "weight_bytes_per_step", weight_bytes);
        cJSON_AddNumberToObject(r, "copy_bandwidth_bytes_per_s", bw);
        cJSON_AddNumberToObject(r, "roofline_tokens_per_s", roof_tps);
        cJSON_AddNumberToObject(r, "fraction_of_roofline", roof_tps > 0 ? tps / roof_tps : 0);
        cJSON_AddNumberToObject(r, "cpu_fallbacks", fallbacks);
        char *txt = cJSON_Print(r);
        FILE *f = fopen(json, "w");
        if (f && txt) fputs(txt, f);
        if (f) fclose(f);
        free(txt);
        cJSON_Delete(r);
    }
    free(logits);
    free(prompt);
    free(step);
    drt_session_free(s);
    drt_model_free(m);
    return fallbacks ? 1 : 0;
}
