/* Vulkan: shader modules and compute pipelines.
 *
 * One descriptor set layout and one pipeline layout (VK_N_BIND storage
 * buffers, VK_PUSH_BYTES of push constants) serve every shader. A shader
 * module is made from the embedded SPIR-V (cmake/vulkan_shaders.cmake) the
 * first time it is used; a pipeline per (shader, specialization constants)
 * is created through the pipeline cache and kept for the context's life.
 * Also the choices that become specialization constants: the workgroup
 * size (vk_wg, vk_cpu_lanes) and the subgroup variant of a module. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "vk_internal.h"

drt_status vk_pipeline_init(vk_ctx *c) {
    VkDescriptorSetLayoutBinding lb[VK_N_BIND];
    for (int i = 0; i < VK_N_BIND; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){(uint32_t)i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                               VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = VK_N_BIND, .pBindings = lb};
    VkResult r = c->f.vkCreateDescriptorSetLayout(c->dev, &li, NULL, &c->dsl);
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &c->dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pr};
    if (r == VK_SUCCESS) r = c->f.vkCreatePipelineLayout(c->dev, &pli, NULL, &c->layout);
    VkPipelineCacheCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    if (r == VK_SUCCESS) r = c->f.vkCreatePipelineCache(c->dev, &pci, NULL, &c->pcache);
    if (r != VK_SUCCESS) return drt_set_error(DRT_ERR_BACKEND, "vulkan: device setup failed: %s", vk_result_str(r));
    return DRT_OK;
}

void vk_pipeline_release(vk_ctx *c) {
    if (c->dev) {
        for (int i = 0; i < c->n_pipes; i++) c->f.vkDestroyPipeline(c->dev, c->pipes[i].pipe, NULL);
        for (int i = 0; i < VK_N_SHADERS; i++)
            if (c->modules[i]) c->f.vkDestroyShaderModule(c->dev, c->modules[i], NULL);
        if (c->pcache) c->f.vkDestroyPipelineCache(c->dev, c->pcache, NULL);
        if (c->layout) c->f.vkDestroyPipelineLayout(c->dev, c->layout, NULL);
        if (c->dsl) c->f.vkDestroyDescriptorSetLayout(c->dev, c->dsl, NULL);
    }
    free(c->pipes);
    c->pipes = NULL;
    c->n_pipes = c->cap_pipes = 0;
}

/* SPIR-V opcodes and enumerants used below (SPIR-V spec, section 3) */
enum {
    SPV_OP_EXTENSION = 10,
    SPV_OP_ENTRY_POINT = 15,
    SPV_OP_EXECUTION_MODE = 16,
    SPV_OP_CAPABILITY = 17,
    SPV_CAP_DENORM_PRESERVE = 4464,
    SPV_MODE_DENORM_PRESERVE = 4459,
};

/* A copy of the module (n words; *n becomes the new count) declaring
 * DenormPreserve for 32-bit floats on its entry point: OpCapability
 * DenormPreserve, OpExtension "SPV_KHR_float_controls" and OpExecutionMode
 * %main DenormPreserve 32, each placed in its section of the logical layout
 * (capabilities, extensions, ..., entry points, execution modes). NULL on a
 * module that is not one compute shader laid out so, or out of memory. */
static uint32_t *spirv_denorm_preserve(const uint32_t *code, size_t *n) {
    static const char ext[] = "SPV_KHR_float_controls"; /* 23 bytes with its NUL: 6 words */
    const size_t ext_words = 1 + (sizeof ext + 3) / 4;
    size_t words = *n, cap_end = 0, mode_end = 0;
    uint32_t entry = 0;
    if (words < 5 || code[0] != 0x07230203u) return NULL;
    for (size_t i = 5; i < words;) {
        uint32_t op = code[i] & 0xffffu, wc = code[i] >> 16;
        if (wc == 0 || wc > words - i) return NULL;
        if (op == SPV_OP_CAPABILITY) {
            if (wc == 2 && code[i + 1] == SPV_CAP_DENORM_PRESERVE) return NULL; /* already there: not ours */
            cap_end = i + wc;
        } else if (op == SPV_OP_ENTRY_POINT) {
            if (entry) return NULL; /* one entry point per module */
            entry = code[i + 2];
            mode_end = i + wc;
        } else if (op == SPV_OP_EXECUTION_MODE) {
            mode_end = i + wc;
        }
        i += wc;
    }
    /* the new extension goes right after the capabilities, before any other
     * extension or import: valid in the logical layout either way */
    if (!cap_end || !entry || mode_end < cap_end) return NULL;
    size_t add = 2 + ext_words + 4;
    uint32_t *out = malloc((words + add) * sizeof *out);
    if (!out) return NULL;
    memcpy(out, code, cap_end * 4);
    size_t o = cap_end;
    out[o++] = 2u << 16 | SPV_OP_CAPABILITY;
    out[o++] = SPV_CAP_DENORM_PRESERVE;
    out[o++] = (uint32_t)ext_words << 16 | SPV_OP_EXTENSION;
    memset(out + o, 0, (ext_words - 1) * 4);
    memcpy(out + o, ext, sizeof ext);
    o += ext_words - 1;
    memcpy(out + o, code + cap_end, (mode_end - cap_end) * 4);
    o += mode_end - cap_end;
    out[o++] = 4u << 16 | SPV_OP_EXECUTION_MODE;
    out[o++] = entry;
    out[o++] = SPV_MODE_DENORM_PRESERVE;
    out[o++] = 32; /* the float width it applies to */
    memcpy(out + o, code + mode_end, (words - mode_end) * 4);
    o += words - mode_end;
    *n = o;
    return out;
}

/* c->modules[sh] from the embedded SPIR-V, made the first time */
static drt_status shader_module(vk_ctx *c, vk_shader sh) {
    if (c->modules[sh]) return DRT_OK;
    static const char *names[] = {
#define VK_SHADER_NAME(id, name) name,
        VK_SHADER_LIST(VK_SHADER_NAME)
#undef VK_SHADER_NAME
    };
    const struct drt_vk_spirv *m = NULL;
    for (int i = 0; i < drt_vk_spirv_count; i++)
        if (strcmp(drt_vk_spirv_table[i].name, names[sh]) == 0) m = &drt_vk_spirv_table[i];
    if (!m) return drt_set_error(DRT_ERR_BACKEND, "vulkan: shader %s is not embedded in this build", names[sh]);
    uint32_t *patched = NULL;
    size_t words = m->size / 4;
    if (c->denorm_preserve) {
        patched = spirv_denorm_preserve(m->code, &words);
        if (!patched)
            return drt_set_error(DRT_ERR_BACKEND, "vulkan: shader %s: cannot add DenormPreserve (SPIR-V malformed?)",
                                 names[sh]);
    }
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = words * 4,
                                   .pCode = patched ? patched : m->code};
    VkResult r = c->f.vkCreateShaderModule(c->dev, &mi, NULL, &c->modules[sh]);
    free(patched);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkCreateShaderModule(%s) failed: %s", names[sh],
                             vk_result_str(r));
    return DRT_OK;
}

drt_status vk_pipeline(vk_ctx *c, vk_shader sh, const uint32_t *spec, int nspec, VkPipeline *out) {
    for (int i = 0; i < c->n_pipes; i++) {
        vk_pipe *p = &c->pipes[i];
        if (p->shader == (int)sh && p->nspec == nspec && memcmp(p->spec, spec, sizeof(uint32_t) * (size_t)nspec) == 0) {
            *out = p->pipe;
            return DRT_OK;
        }
    }
    drt_status s = shader_module(c, sh);
    if (s != DRT_OK) return s;
    if (c->n_pipes == c->cap_pipes) {
        int nc = c->cap_pipes ? 2 * c->cap_pipes : 32;
        vk_pipe *np = realloc(c->pipes, sizeof *np * (size_t)nc);
        if (!np) return drt_set_error(DRT_ERR_OOM, "out of memory");
        c->pipes = np;
        c->cap_pipes = nc;
    }
    VkSpecializationMapEntry me[VK_MAX_SPEC];
    for (int i = 0; i < nspec; i++) me[i] = (VkSpecializationMapEntry){(uint32_t)i, (uint32_t)(4 * i), 4};
    VkSpecializationInfo si = {.mapEntryCount = (uint32_t)nspec,
                               .pMapEntries = me,
                               .dataSize = sizeof(uint32_t) * (size_t)nspec,
                               .pData = spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = c->modules[sh],
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = c->layout,
    };
    VkPipeline p;
    VkResult r = c->f.vkCreateComputePipelines(c->dev, c->pcache, 1, &ci, NULL, &p);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkCreateComputePipelines(shader %d) failed: %s", (int)sh,
                             vk_result_str(r));
    vk_pipe *e = &c->pipes[c->n_pipes++];
    e->shader = (int)sh;
    e->nspec = nspec;
    memcpy(e->spec, spec, sizeof(uint32_t) * (size_t)nspec);
    e->pipe = p;
    vk_counters.pipelines++;
    *out = p;
    return DRT_OK;
}

/* The pipelines whose specialization does not depend on a node's shape,
 * created with the device so that no forward pass creates them: the
 * row-wise ops (norm, dual softmax), the elementwise ops in both widths,
 * the KV copy shader (KV_WRITE of more sequences than copy regions), ROPE and
 * the split-key merge for one and two maps. Shape classes (attention
 * tiles, MATMUL, EMBED) are created when a plan asks whether the backend
 * supports its nodes (vk_supports -> vk_attention_prepare,
 * vk_matmul_prepare, vk_embed_prepare). A failure here is not fatal:
 * vk_dispatch creates what is missing. */
void vk_prewarm(vk_ctx *c) {
    VkPipeline p;
    /* elementwise.c and norm.c: one subgroup on CPU devices; attention.c
     * (dual softmax, split-key merge): 64 lanes there */
    const uint32_t wg = vk_wg(c, 256, vk_cpu_lanes(c)), aw = vk_wg(c, 256, 64), sg = c->use_sg;
    for (uint32_t op = 0; op < 3; op++)
        for (uint32_t v4 = 0; v4 < 2; v4++)
            (void)vk_pipeline(c, VK_SH_ELEMENTWISE, (const uint32_t[]){wg, sg, op, v4}, 4, &p);
    for (uint32_t v4 = 0; v4 < 2; v4++) (void)vk_pipeline(c, VK_SH_KV_WRITE, (const uint32_t[]){wg, sg, v4, 0}, 4, &p);
    (void)vk_pipeline(c, VK_SH_ROPE, (const uint32_t[]){wg, sg}, 2, &p);
    (void)vk_pipeline(c, vk_sg_variant(c, VK_SH_NORM), (const uint32_t[]){wg, sg}, 2, &p);
    (void)vk_pipeline(c, vk_sg_variant(c, VK_SH_DUAL_SOFTMAX), (const uint32_t[]){aw, sg}, 2, &p);
    for (uint32_t maps = 1; maps <= 2; maps++)
        (void)vk_pipeline(c, VK_SH_ATTENTION_COMBINE, (const uint32_t[]){aw, sg, maps}, 3, &p);
}

/* ---- specialization choices ----------------------------------------------------- */

vk_shader vk_sg_variant(const vk_ctx *c, vk_shader sh) {
    return c->use_sg ? sh : (vk_shader)(sh + 1);
}

uint32_t vk_wg(const vk_ctx *c, uint32_t want_gpu, uint32_t want_cpu) {
    const VkPhysicalDeviceLimits *l = &c->props.limits;
    uint32_t w = c->tune_cpu ? want_cpu : want_gpu;
    uint32_t lim = l->maxComputeWorkGroupInvocations < l->maxComputeWorkGroupSize[0] ? l->maxComputeWorkGroupInvocations
                                                                                     : l->maxComputeWorkGroupSize[0];
    while (w > lim && w > 1) w /= 2;
    return w;
}

uint32_t vk_cpu_lanes(const vk_ctx *c) {
    return c->subgroup_size >= 4 && c->subgroup_size <= 64 ? c->subgroup_size : 8;
}
