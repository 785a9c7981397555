/* What the host is, for reports: the CPU's model and vendor as the OS
 * describes them (Linux: /proc/cpuinfo; elsewhere, or when it does not say,
 * empty strings). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "drt_graph.h"

/* the value of "key<spaces>: value" when line starts with key */
static int field(const char *line, const char *key, char *out, size_t n) {
    size_t k = strlen(key);
    if (strncmp(line, key, k) != 0) return 0;
    const char *p = line + k;
    while (*p == ' ' || *p == '\t') p++;
    if (*p != ':') return 0;
    p++;
    while (*p == ' ') p++;
    size_t len = strcspn(p, "\n");
    if (len >= n) len = n - 1;
    memcpy(out, p, len);
    out[len] = 0;
    return 1;
}

static const char *arm_implementer(const char *hex) {
    static const struct {
        const char *id, *name;
    } T[] = {{"0x41", "ARM"},    {"0x42", "Broadcom"}, {"0x43", "Cavium"}, {"0x48", "HiSilicon"},
             {"0x4e", "NVIDIA"}, {"0x51", "Qualcomm"}, {"0x61", "Apple"},  {"0xc0", "Ampere"}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (strcmp(hex, T[i].id) == 0) return T[i].name;
    return hex;
}

void drt_host_cpu(char *model, size_t model_n, char *vendor, size_t vendor_n) {
    if (model_n) model[0] = 0;
    if (vendor_n) vendor[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512], impl[32] = "";
    while (fgets(line, sizeof line, f)) {
        if (!model[0] && (field(line, "model name", model, model_n) || field(line, "Hardware", model, model_n) ||
                          field(line, "cpu model", model, model_n)))
            continue;
        if (!vendor[0] && field(line, "vendor_id", vendor, vendor_n)) continue;
        if (!impl[0]) field(line, "CPU implementer", impl, sizeof impl);
        if (model[0] && vendor[0]) break;
    }
    fclose(f);
    if (!vendor[0] && impl[0]) snprintf(vendor, vendor_n, "%s", arm_implementer(impl));
}

/* The host CPU as a device (cpu and ref backends): name and vendor from
 * /proc/cpuinfo, physical memory, f32 lanes of its widest vector unit, and
 * whether it computes in f16 / bf16 natively (x86: AVX512-FP16 /
 * AVX512-BF16; arm64: the FP16 / BF16 extensions). */
void drt_host_cpu_props(drt_device_props *out) {
    drt_host_cpu(out->name, sizeof out->name, out->vendor, sizeof out->vendor);
    snprintf(out->type, sizeof out->type, "CPU");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    out->subgroup_size = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("avx") ? 8 : 4;
    out->fp16 = __builtin_cpu_supports("avx512fp16") ? 1 : 0;
    out->bf16 = __builtin_cpu_supports("avx512bf16") ? 1 : 0;
#elif defined(__aarch64__) && defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    out->subgroup_size = 4;
    out->fp16 = (hw & (1UL << 10)) ? 1 : 0;  /* HWCAP_ASIMDHP */
    out->bf16 = (hw2 & (1UL << 14)) ? 1 : 0; /* HWCAP2_BF16 */
#else
    out->subgroup_size = 1;
#endif
}
