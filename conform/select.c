/* The names in conform's options: ops, backends (compiled in or not), their
 * devices; and the selection of backends they make, each opened on its
 * device. A name that does not exist is a usage error listing the valid ones. */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conform_internal.h"
#include "drt_settings.h" /* drt_setting_str */

/* the next non-empty item of a comma list; 0 at the end */
static int next_item(const char **cur, const char **item, size_t *len) {
    const char *p = *cur;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        *cur = e ? e + 1 : p + n;
        if (n) {
            *item = p;
            *len = n;
            return 1;
        }
        p = *cur;
    }
    return 0;
}

int cf_in_list(const char *list, const char *name) {
    const char *cur = list, *it;
    size_t n;
    while (next_item(&cur, &it, &n))
        if (n == strlen(name) && strncasecmp(it, name, n) == 0) return 1;
    return 0;
}

/* the name of registry entry i, compiled in or not */
static const char *reg_name(int i) {
    const drt_backend_ops *ops = drt_registry_get(i);
    if (ops) return ops->name;
    drt_backend_info bi = {0};
    drt_backend_get_info(i, &bi);
    return bi.name;
}

static int find_backend(const char *name, size_t len) {
    for (int i = 0; i < drt_registry_count(); i++) {
        const char *nm = reg_name(i);
        if (nm && strlen(nm) == len && strncasecmp(nm, name, len) == 0) return i;
    }
    return -1;
}

static int find_op(const char *name, size_t len) {
    for (int op = 1; op < DRT_OP_COUNT; op++) {
        const char *nm = drt_op_name((drt_op)op);
        if (strlen(nm) == len && strncasecmp(nm, name, len) == 0) return op;
    }
    return -1;
}

static void valid_backends(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < drt_registry_count() && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", reg_name(i));
}

static void valid_ops(char *buf, size_t n) {
    size_t o = 0;
    for (int op = 1; op < DRT_OP_COUNT && o < n; op++)
        o += (size_t)snprintf(buf + o, n - o, "%s, ", drt_op_name((drt_op)op));
    if (o < n) snprintf(buf + o, n - o, "or none");
}

/* a usage error: the options name something that does not exist */
drt_status cf_usage(drt_conform_result *r, const char *fmt, ...) {
    char msg[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->usage_error = 1;
    return drt_set_error(DRT_ERR_INVALID_ARG, "%s", msg);
}

/* case-insensitive: does hay contain needle */
static int contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0) return 1;
    return n == 0;
}

/* sel names device index *out of ops's ndev devices: an index, or the first
 * device whose name contains sel (case-insensitive); else 0 and the devices
 * listed in list */
static int resolve_device(const drt_backend_ops *ops, int ndev, const char *sel, int *out, char *list, size_t ln) {
    char *end;
    long idx = strtol(sel, &end, 10);
    if (*sel && !*end && isdigit((unsigned char)sel[0]) && idx < ndev) {
        *out = (int)idx;
        return 1;
    }
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; i < ndev; i++) {
        char name[256];
        if (ops->device_name(i, name, sizeof name) != DRT_OK) snprintf(name, sizeof name, "?");
        if ((*end || !*sel) && contains_nocase(name, sel)) {
            *out = i;
            return 1;
        }
        if (o < ln) o += (size_t)snprintf(list + o, ln - o, "%s[%d] %s", i ? "; " : "", i, name);
    }
    return 0;
}

int cf_op_selected(const drt_conform_opts *o, drt_op op) {
    return !(o->ops && *o->ops && !cf_in_list(o->ops, drt_op_name(op)));
}

int cf_case_selected(const drt_conform_opts *o, const cf_opcase *c) {
    if (!cf_op_selected(o, c->op)) return 0;
    if (c->op != DRT_OP_KV_WRITE && c->op != DRT_OP_ATTN && c->op != DRT_OP_DIFF_ATTN) return 1;
    return strcmp(drt_dtype_name(c->kvt), cf_kv_type(o->settings)) == 0;
}

/* every op, backend and --require name exists; --require is selected */
static drt_status check_names(const drt_conform_opts *o, drt_conform_result *r) {
    char valid[600];
    const char *cur, *it;
    size_t n;
    cur = o->ops;
    while (next_item(&cur, &it, &n))
        if (find_op(it, n) < 0 && !(n == 4 && strncasecmp(it, "none", 4) == 0)) {
            valid_ops(valid, sizeof valid);
            return cf_usage(r, "conform: unknown op \"%.*s\" (valid: %s)", (int)n, it, valid);
        }
    const char *lists[2] = {o->backends, o->require}, *flag[2] = {"backend", "--require backend"};
    for (int l = 0; l < 2; l++) {
        cur = lists[l];
        while (next_item(&cur, &it, &n))
            if (find_backend(it, n) < 0) {
                valid_backends(valid, sizeof valid);
                return cf_usage(r, "conform: unknown %s \"%.*s\" (valid: %s)", flag[l], (int)n, it, valid);
            }
    }
    cur = o->require;
    while (next_item(&cur, &it, &n)) {
        const char *nm = reg_name(find_backend(it, n));
        if (o->backends && *o->backends && !cf_in_list(o->backends, nm))
            return cf_usage(r, "conform: --require %s, but --backend %s does not select it", nm, o->backends);
    }
    return DRT_OK;
}

#define CF_MAX_REG (CF_MAX_BE * 4)

/* --device BACKEND=SEL,...: sel[registry index] points at SEL in devs (a
 * copy of the option, cut up) */
static drt_status parse_devices(const drt_conform_opts *o, char *devs, size_t dn, const char *sel[CF_MAX_REG],
                                drt_conform_result *r) {
    char valid[600];
    if (!o->devices) return DRT_OK;
    if (strlen(o->devices) >= dn) return cf_usage(r, "conform: --device: the value is too long");
    snprintf(devs, dn, "%s", o->devices);
    for (char *p = devs, *e; p && *p; p = e) {
        e = strchr(p, ',');
        if (e) *e++ = 0;
        if (!*p) continue;
        char *eq = strchr(p, '=');
        if (!eq || eq == p || !eq[1])
            return cf_usage(r,
                            "conform: --device wants BACKEND=SEL[,BACKEND=SEL] (SEL: an index or a name "
                            "substring), got \"%s\"",
                            p);
        *eq = 0;
        int bi = find_backend(p, strlen(p));
        if (bi < 0) {
            valid_backends(valid, sizeof valid);
            return cf_usage(r, "conform: --device: unknown backend \"%s\" (valid: %s)", p, valid);
        }
        if (strcmp(reg_name(bi), "ref") == 0)
            return cf_usage(r, "conform: --device: ref is the reference every backend is checked against; it has "
                               "one device and --device does not apply to it");
        if (o->backends && *o->backends && !cf_in_list(o->backends, reg_name(bi)))
            return cf_usage(r, "conform: --device %s=%s, but --backend %s does not select %s", p, eq + 1, o->backends,
                            reg_name(bi));
        if (bi >= CF_MAX_REG || sel[bi]) return cf_usage(r, "conform: --device names %s twice", reg_name(bi));
        sel[bi] = eq + 1;
    }
    return DRT_OK;
}

/* Opens registry entry i as b, with the run's settings, on the device
 * --device (sel) names, else DIFFRT_DEVICE (env; never on ref: the oracle
 * and its own row run on its one device), else the backend's default. A backend that cannot be opened
 * is recorded as unavailable with why; only a --device naming no device is
 * an error (a usage error). */
static drt_status open_backend(int i, const char *sel, const char *env, const drt_settings *set, cf_backend *b,
                               drt_conform_result *r) {
    const drt_backend_ops *ops = drt_registry_get(i);
    const char *name = b->name;
    if (!ops) {
        drt_backend_info bi = {0};
        drt_backend_get_info(i, &bi);
        snprintf(b->why, sizeof b->why, "%s", bi.reason ? bi.reason : "not compiled in");
        return DRT_OK;
    }
    int ndev = 0;
    char why[256] = "";
    if (ops->probe(&ndev, why, sizeof why) != DRT_OK || ndev <= 0) {
        snprintf(b->why, sizeof b->why, "%s", why[0] ? why : "no devices found");
        return DRT_OK;
    }
    const char *s = sel;
    if (s)
        b->dev_from = "--device";
    else if (env && *env && strcmp(name, "ref") != 0)
        s = env, b->dev_from = "DIFFRT_DEVICE";
    int dev = -1;
    if (s) {
        char list[900];
        snprintf(b->dev_sel, sizeof b->dev_sel, "%s", s);
        if (!resolve_device(ops, ndev, s, &dev, list, sizeof list)) {
            if (sel)
                return cf_usage(r, "conform: --device %s=%s: no such %s device (devices: %s)", name, s, name, list);
            snprintf(b->why, sizeof b->why, "DIFFRT_DEVICE=%s names no %s device (devices: %.200s)", s, name, list);
            return DRT_OK;
        }
    }
    char idx[16] = "";
    if (dev >= 0) snprintf(idx, sizeof idx, "%d", dev);
    if (drt_backend_open_settings(name, idx, 0, set, &b->be) != DRT_OK) {
        snprintf(b->why, sizeof b->why, "%s", drt_last_error());
        return DRT_OK;
    }
    b->device = b->be->device >= 0 ? b->be->device : 0;
    if (ops->device_name(b->device, b->dev_desc, sizeof b->dev_desc) != DRT_OK) b->dev_desc[0] = 0;
    if (ops->device_props && ops->device_props(b->device, &b->props) == DRT_OK) b->have_props = 1;
    if (ops->precision) b->precision = ops->precision(b->be);
    /* a declared reduced-precision mode (cpu bf16 or int8, vulkan fp16)
     * holds whole-model logits to the loosest bound an op may declare */
    if (strcmp(b->precision, "f32") != 0) b->model_bound = CF_REDUCED_NMSE;
    return DRT_OK;
}

drt_status cf_select_backends(const drt_conform_opts *o, cf_run *run, drt_conform_result *r) {
    drt_status st = check_names(o, r);
    const char *sel[CF_MAX_REG] = {0};
    char devs[1024] = "";
    if (st == DRT_OK) st = parse_devices(o, devs, sizeof devs, sel, r);
    if (st != DRT_OK) return st;
    const char *env = getenv("DIFFRT_DEVICE");
    /* the selection, in registry order; a required one that is not compiled
     * in or not available is recorded, never skipped silently */
    for (int i = 0; i < drt_registry_count() && run->nbe < CF_MAX_BE; i++) {
        const char *name = reg_name(i);
        if (o->backends && *o->backends && !cf_in_list(o->backends, name)) continue;
        cf_backend *b = &run->be[run->nbe++];
        memset(b, 0, sizeof *b);
        b->name = name;
        b->required = cf_in_list(o->require, name);
        b->device = -1;
        b->dev_from = "default";
        b->precision = "f32";
        b->model_bound = CF_MODEL_NMSE;
        st = open_backend(i, i < CF_MAX_REG ? sel[i] : NULL, env, o->settings, b, r);
        if (st != DRT_OK) return st;
    }
    return DRT_OK;
}

const char *cf_kv_type(const drt_settings *set) {
    const char *kv = "";
    if (drt_setting_str(set, "kv_type", &kv) != DRT_OK || !kv || !*kv) return "f32";
    return kv;
}
