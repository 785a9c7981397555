/* What the host is, for reports: the CPU's model and vendor as the OS
 * describes them (Linux: /proc/cpuinfo; elsewhere, or when it does not say,
 * empty strings). */
#include <stdio.h>
#include <string.h>

#include "drt_graph.h"

/* the value of "key<spaces>: value" when line starts with key */
static int field(const char *line, const char *key, char *out, size_t n) {
    size_t k = strlen(key);
    if (strncmp(line, key, k) != 0) return 0;
    const char *p = line + k;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p != ':') return 0;
    p++;
    while (*p == ' ')
        p++;
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
        if (!model[0] &&
            (field(line, "model name", model, model_n) || field(line, "Hardware", model, model_n) ||
             field(line, "cpu model", model, model_n)))
            continue;
        if (!vendor[0] && field(line, "vendor_id", vendor, vendor_n)) continue;
        if (!impl[0]) field(line, "CPU implementer", impl, sizeof impl);
        if (model[0] && vendor[0]) break;
    }
    fclose(f);
    if (!vendor[0] && impl[0]) snprintf(vendor, vendor_n, "%s", arm_implementer(impl));
}
