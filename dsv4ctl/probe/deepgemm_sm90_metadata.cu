// dsv4ctl probe: launch DeepGEMM's SM90 paged-MQA scheduler-metadata kernel directly.
//
// The kernel under test is `deep_gemm::sched::sm90_paged_mqa_logits_metadata`, taken verbatim from
// the DeepGEMM include directory passed with -I (the effective one on this node, or one unpacked
// from a vLLM wheel). One process runs one case, because an illegal memory access poisons the CUDA
// context for the rest of the process.
//
// Build (done by `dsv4ctl probe deepgemm --mode kernel`):
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I<deepgemm include> [-I<cutlass include>]
//        -DDSV4CTL_NUM_SMS=<SMs of the device> -DDSV4CTL_DG_NUM_NEXT_N_ATOMS=<0|1>
//        deepgemm_sm90_metadata.cu -o launcher
//   DSV4CTL_DG_NUM_NEXT_N_ATOMS=1 selects the launch form of DeepGEMM as vendored by vLLM >= 0.28
//   (an extra `num_next_n_atoms` argument); 0 the form of vLLM 0.27.x.
// Device query build (no DeepGEMM headers needed): add -DDSV4CTL_QUERY_ONLY.
//
// Run: launcher <batch_size> <fill>
//   context_lens is a (batch_size, 1) uint32 tensor filled with <fill>; next_n = 1; SPLIT_KV = 256;
//   dynamic shared memory = align(batch_size, 32) * 4 bytes, as DeepGEMM's host code sizes it.
// Prints one JSON line. Exit status: 0 ok, 3 CUDA error (e.g. illegal memory access), 2 usage,
// 4 setup failure (no device, allocation).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#ifndef DSV4CTL_QUERY_ONLY
// DeepGEMM's own JIT sources include these before its headers; some headers rely on it.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <deep_gemm/scheduler/sm90_paged_mqa_logits.cuh>
#endif

static void print_escaped(const char* text) {
    for (const char* p = text; *p; ++p) {
        if (*p == '"' || *p == '\\') std::printf("\\%c", *p);
        else if (static_cast<unsigned char>(*p) >= 0x20) std::putchar(*p);
    }
}

#ifdef DSV4CTL_QUERY_ONLY

int main() {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        std::printf("{\"status\": \"no-device\", \"error\": \"");
        print_escaped(err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
        std::printf("\"}\n");
        return 4;
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::printf("{\"status\": \"ok\", \"name\": \"");
    print_escaped(prop.name);
    std::printf("\", \"cc_major\": %d, \"cc_minor\": %d, \"num_sms\": %d, \"driver_api\": %d, \"runtime_api\": %d}\n",
                prop.major, prop.minor, prop.multiProcessorCount, driver, runtime);
    return 0;
}

#else

#ifndef DSV4CTL_NUM_SMS
#error "define DSV4CTL_NUM_SMS (the device's SM count)"
#endif
#ifndef DSV4CTL_DG_NUM_NEXT_N_ATOMS
#error "define DSV4CTL_DG_NUM_NEXT_N_ATOMS (1 for DeepGEMM with the num_next_n_atoms argument, else 0)"
#endif

constexpr uint32_t kSplitKV = 256;
constexpr uint32_t kNumSMs = DSV4CTL_NUM_SMS;
constexpr uint32_t kMaxAlignedBatch = 1024;

template <uint32_t kAligned>
static cudaError_t launch(uint32_t batch_size, const uint32_t* context_lens, uint32_t* schedule) {
    const uint32_t next_n = 1;
    const bool is_2d = true;
    const size_t smem = kAligned * sizeof(uint32_t);
#if DSV4CTL_DG_NUM_NEXT_N_ATOMS
    const uint32_t num_next_n_atoms = 1;  // ceil_div(next_n, next_n >= 2 ? 2 : 1)
    deep_gemm::sched::sm90_paged_mqa_logits_metadata<kAligned, kSplitKV, kNumSMs, false>
        <<<1, 32, smem>>>(batch_size, next_n, is_2d, num_next_n_atoms, context_lens, nullptr, schedule);
#else
    deep_gemm::sched::sm90_paged_mqa_logits_metadata<kAligned, kSplitKV, kNumSMs, false>
        <<<1, 32, smem>>>(batch_size, next_n, is_2d, context_lens, nullptr, schedule);
#endif
    return cudaGetLastError();
}

template <uint32_t kAligned>
static cudaError_t dispatch(uint32_t aligned, uint32_t batch_size, const uint32_t* lens, uint32_t* schedule) {
    if constexpr (kAligned > kMaxAlignedBatch) {
        return cudaErrorInvalidValue;
    } else {
        if (aligned == kAligned) return launch<kAligned>(batch_size, lens, schedule);
        return dispatch<kAligned + 32>(aligned, batch_size, lens, schedule);
    }
}

static int report(uint32_t b, uint32_t fill, uint32_t aligned, const char* status, const char* error, int sentinel_ok) {
    std::printf("{\"batch_size\": %u, \"fill\": %u, \"aligned_batch_size\": %u, \"num_sms\": %u, \"split_kv\": %u, "
                "\"launch_form\": \"%s\", \"status\": \"%s\", \"error\": \"",
                b, fill, aligned, kNumSMs, kSplitKV, DSV4CTL_DG_NUM_NEXT_N_ATOMS ? "num_next_n_atoms" : "legacy",
                status);
    print_escaped(error ? error : "");
    std::printf("\", \"sentinel_ok\": %s}\n", sentinel_ok < 0 ? "null" : (sentinel_ok ? "true" : "false"));
    std::fflush(stdout);
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s <batch_size> <fill>\n", argv[0]);
        return 2;
    }
    const long b_arg = std::strtol(argv[1], nullptr, 10), fill_arg = std::strtol(argv[2], nullptr, 10);
    if (b_arg < 1 || b_arg > static_cast<long>(kMaxAlignedBatch) || fill_arg < 0) {
        std::fprintf(stderr, "batch_size must be 1..%u and fill >= 0\n", kMaxAlignedBatch);
        return 2;
    }
    const uint32_t b = static_cast<uint32_t>(b_arg), fill = static_cast<uint32_t>(fill_arg);
    const uint32_t aligned = (b + 31) / 32 * 32;

    uint32_t *lens = nullptr, *schedule = nullptr;
    const size_t schedule_words = (kNumSMs + 1) * 2;
    if (cudaMalloc(&lens, b * sizeof(uint32_t)) != cudaSuccess ||
        cudaMalloc(&schedule, schedule_words * sizeof(uint32_t)) != cudaSuccess) {
        report(b, fill, aligned, "setup-error", cudaGetErrorString(cudaGetLastError()), -1);
        return 4;
    }
    std::vector<uint32_t> host_lens(b, fill);
    cudaMemcpy(lens, host_lens.data(), b * sizeof(uint32_t), cudaMemcpyHostToDevice);
    cudaMemset(schedule, 0xff, schedule_words * sizeof(uint32_t));

    cudaError_t err = dispatch<32>(aligned, b, lens, schedule);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        report(b, fill, aligned, "cuda-error", cudaGetErrorString(err), -1);
        return 3;
    }
    std::vector<uint32_t> host_schedule(schedule_words);
    err = cudaMemcpy(host_schedule.data(), schedule, schedule_words * sizeof(uint32_t), cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
        report(b, fill, aligned, "cuda-error", cudaGetErrorString(err), -1);
        return 3;
    }
    // The last entry is the one-past-the-end sentinel: (batch_size * num_next_n_atoms, 0).
    const int sentinel_ok = host_schedule[kNumSMs * 2] == b && host_schedule[kNumSMs * 2 + 1] == 0;
    report(b, fill, aligned, "ok", nullptr, sentinel_ok);
    return 0;
}

#endif
