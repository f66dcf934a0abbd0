/* A test double of the CUDA runtime and driver entry points that PyTorch's
 * caching allocator (libc10_cuda.so) calls, so that the real, compiled
 * allocator runs on a machine with no GPU (issue 23).  Loaded with LD_PRELOAD
 * in a subprocess only (tests/test_allocator_oracle.py); never in the pytest
 * process.  With tests/cuda_stub/cublas_stub.c beside it, a whole training
 * step also runs on real CUDA tensors, every kernel a no-op (the end of this
 * file; tests/cuda_stub/real_step.py).
 *
 * One device, H100-like properties.  cudaMalloc/cudaFree and, for expandable
 * segments, cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemUnmap/cuMemRelease
 * hand out addresses from a counter and count bytes against a capacity:
 *   STUB_CUDA_CAPACITY  bytes the "device" can hand out (default 80 GiB)
 *   STUB_CUDA_TOTAL     totalGlobalMem reported (default: the capacity)
 * No memory is ever touched: the addresses are never dereferenced by the
 * allocator.  Streams and events are dummies that are always complete.
 *
 * Compiled by the test session with the system cc against the headers of the
 * pinned wheel's nvidia-cuda-runtime package (for the struct layouts).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static size_t capacity_bytes(void) {
  static size_t cap = 0;
  if (!cap) {
    const char* s = getenv("STUB_CUDA_CAPACITY");
    cap = s ? strtoull(s, NULL, 10) : (size_t)80 << 30;
  }
  return cap;
}

static size_t total_bytes(void) {
  const char* s = getenv("STUB_CUDA_TOTAL");
  return s ? strtoull(s, NULL, 10) : capacity_bytes();
}

static size_t used = 0;                          /* bytes handed out now */
static uintptr_t next_address = 0x100000000000;  /* where the next range starts */
static uintptr_t next_handle = 1;
static int last_error = 0;

/* ptr or handle -> bytes, open addressing (keys are never 0) */
#define TABLE_SIZE (1u << 20)
static uintptr_t keys[TABLE_SIZE];
static size_t values[TABLE_SIZE];

static size_t slot(uintptr_t key) {
  size_t i = (size_t)((key >> 9) * 0x9E3779B97F4A7C15ull) & (TABLE_SIZE - 1);
  while (keys[i] && keys[i] != key) i = (i + 1) & (TABLE_SIZE - 1);
  return i;
}
static void remember(uintptr_t key, size_t n) { size_t i = slot(key); keys[i] = key; values[i] = n; }
static size_t forget(uintptr_t key) {
  size_t i = slot(key), n;
  if (!keys[i]) return 0;
  n = values[i];
  keys[i] = 0;
  /* re-insert the rest of the cluster */
  for (size_t j = (i + 1) & (TABLE_SIZE - 1); keys[j]; j = (j + 1) & (TABLE_SIZE - 1)) {
    uintptr_t k = keys[j]; size_t v = values[j];
    keys[j] = 0;
    remember(k, v);
  }
  return n;
}

static uintptr_t take_addresses(size_t n, size_t align) {
  const size_t page = (size_t)2 << 20;
  if (align < page) align = page;
  uintptr_t a = (next_address + align - 1) & ~(uintptr_t)(align - 1);
  next_address = a + ((n + page - 1) & ~(page - 1)) + page;
  return a;
}

/* what the oracle reads back through ctypes */
EXPORT size_t stub_cuda_used_bytes(void) { return used; }
EXPORT size_t stub_cuda_capacity(void) { return capacity_bytes(); }

/* ---- runtime: device ---- */
EXPORT cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
EXPORT cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
EXPORT cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
EXPORT cudaError_t cudaInitDevice(int d, unsigned a, unsigned b) { (void)a; (void)b; return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
EXPORT cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return cudaSuccess; }
EXPORT cudaError_t cudaRuntimeGetVersion(int* v) { *v = 13000; return cudaSuccess; }
EXPORT cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
EXPORT cudaError_t cudaDeviceCanAccessPeer(int* can, int a, int b) { (void)a; (void)b; *can = 0; return cudaSuccess; }
EXPORT cudaError_t cudaDeviceEnablePeerAccess(int p, unsigned f) { (void)p; (void)f; return cudaSuccess; }
EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}
EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int d) {
  if (d != 0) return cudaErrorInvalidDevice;
  memset(p, 0, sizeof *p);
  strcpy(p->name, "NVIDIA H100 80GB HBM3 (stub)");
  p->totalGlobalMem = total_bytes();
  p->major = 9; p->minor = 0;
  p->multiProcessorCount = 132;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerBlock = 49152;
  p->sharedMemPerBlockOptin = 232448;
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerBlock = 65536;
  p->l2CacheSize = 50 << 20;
  p->memoryBusWidth = 5120;
  p->totalConstMem = 65536;
  p->pciBusID = 1;
  p->unifiedAddressing = 1;
  p->concurrentKernels = 1;
  return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr attr, int d) {
  (void)d;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 232448; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 49152; break;
    default: *v = 0;
  }
  return cudaSuccess;
}

/* ---- runtime: errors ---- */
EXPORT cudaError_t cudaGetLastError(void) { cudaError_t e = (cudaError_t)last_error; last_error = 0; return e; }
EXPORT cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)last_error; }
EXPORT const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? "out of memory" : e == cudaSuccess ? "no error" : "stub error";
}
EXPORT const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : e == cudaSuccess ? "cudaSuccess" : "cudaErrorStub";
}

/* ---- runtime: memory ---- */
EXPORT cudaError_t cudaMalloc(void** ptr, size_t n) {
  if (n > capacity_bytes() - used) {
    *ptr = NULL;
    last_error = cudaErrorMemoryAllocation;
    return cudaErrorMemoryAllocation;
  }
  uintptr_t a = take_addresses(n, 0);
  remember(a, n);
  used += n;
  *ptr = (void*)a;
  return cudaSuccess;
}
EXPORT cudaError_t cudaFree(void* ptr) {
  if (ptr) used -= forget((uintptr_t)ptr);
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  size_t cap = capacity_bytes();
  if (free_bytes) *free_bytes = cap - used;
  if (total) *total = total_bytes();
  return cudaSuccess;
}

/* ---- runtime: streams and events (always complete) ---- */
static uintptr_t next_object = 0x1000;
EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned f, int p) {
  (void)f; (void)p; *s = (cudaStream_t)(next_object += 16); return cudaSuccess;
}
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned f) { return cudaStreamCreateWithPriority(s, f, 0); }
EXPORT cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, 0, 0); }
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { (void)s; (void)e; (void)f; return cudaSuccess; }
EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* st) {
  (void)s; *st = cudaStreamCaptureStatusNone; return cudaSuccess;
}
EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus* st, unsigned long long* id,
                                            cudaGraph_t* g, const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                            size_t* n) {
  (void)s;
  if (st) *st = cudaStreamCaptureStatusNone;
  if (id) *id = 0;
  if (g) *g = NULL;
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (n) *n = 0;
  return cudaSuccess;
}
EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* m) { (void)m; return cudaSuccess; }
EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned f) { (void)f; *e = (cudaEvent_t)(next_object += 16); return cudaSuccess; }
EXPORT cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned f) { (void)e; (void)s; (void)f; return cudaSuccess; }
EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) { (void)e; return cudaSuccess; }
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { (void)a; (void)b; *ms = 0; return cudaSuccess; }

/* ---- driver API, handed out through cudaGetDriverEntryPoint* ---- */
EXPORT CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : r == CUDA_SUCCESS ? "no error" : "stub error";
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice* d, int i) { *d = i; return i == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
EXPORT CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  *v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? 1 : 0;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext* c) { *c = (CUcontext)0x42; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return CUDA_SUCCESS; }
EXPORT CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* p, CUmemAllocationGranularity_flags o) {
  (void)p; (void)o; *g = (size_t)2 << 20; return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t n, size_t align, CUdeviceptr addr, unsigned long long f) {
  (void)addr; (void)f; *ptr = (CUdeviceptr)take_addresses(n, align); return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t n) { (void)ptr; (void)n; return CUDA_SUCCESS; }
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t n, const CUmemAllocationProp* p, unsigned long long f) {
  (void)p; (void)f;
  if (n > capacity_bytes() - used) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t key = (next_handle++) << 9;
  remember(key, n);
  used += n;
  *h = (CUmemGenericAllocationHandle)key;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) { used -= forget((uintptr_t)h); return CUDA_SUCCESS; }
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f) {
  (void)ptr; (void)n; (void)off; (void)h; (void)f; return CUDA_SUCCESS;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t n) { (void)ptr; (void)n; return CUDA_SUCCESS; }
EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t n, const CUmemAccessDesc* d, size_t c) {
  (void)ptr; (void)n; (void)d; (void)c; return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned f);
EXPORT CUresult cuDriverGetVersion(int* v);

/* entry points PyTorch's DriverAPI resolves at start but the allocator never
 * calls without IPC, green contexts, multicast or logs: "not supported" */
static CUresult not_supported(void) { return CUDA_ERROR_NOT_SUPPORTED; }
static const char* const unsupported[] = {
  "cuCtxFromGreenCtx", "cuCtxPopCurrent", "cuCtxPushCurrent", "cuDevResourceGenerateDesc",
  "cuDevSmResourceSplitByCount", "cuDeviceGetDevResource", "cuGreenCtxCreate", "cuGreenCtxDestroy",
  "cuGreenCtxStreamCreate", "cuLogsRegisterCallback", "cuLogsUnregisterCallback", "cuMemExportToShareableHandle",
  "cuMemGetAddressRange", "cuMemGetAllocationPropertiesFromHandle", "cuMemImportFromShareableHandle",
  "cuMemRetainAllocationHandle", "cuMemsetD32Async", "cuMulticastAddDevice", "cuMulticastBindMem",
  "cuMulticastCreate", "cuMulticastUnbind", "cuStreamWriteValue32",
};

static void* driver_symbol(const char* name) {
  static const struct { const char* name; void* fn; } table[] = {
    {"cuGetErrorString", (void*)cuGetErrorString},
    {"cuDeviceGet", (void*)cuDeviceGet},
    {"cuDeviceGetAttribute", (void*)cuDeviceGetAttribute},
    {"cuCtxGetCurrent", (void*)cuCtxGetCurrent},
    {"cuCtxSetCurrent", (void*)cuCtxSetCurrent},
    {"cuMemGetAllocationGranularity", (void*)cuMemGetAllocationGranularity},
    {"cuMemAddressReserve", (void*)cuMemAddressReserve},
    {"cuMemAddressFree", (void*)cuMemAddressFree},
    {"cuMemCreate", (void*)cuMemCreate},
    {"cuMemRelease", (void*)cuMemRelease},
    {"cuMemMap", (void*)cuMemMap},
    {"cuMemUnmap", (void*)cuMemUnmap},
    {"cuMemSetAccess", (void*)cuMemSetAccess},
    {"cuInit", (void*)cuInit},
    {"cuDriverGetVersion", (void*)cuDriverGetVersion},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(table[i].name, name)) return table[i].fn;
  for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
    if (!strcmp(unsupported[i], name)) return (void*)not_supported;
  return NULL;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned* flags, int* active) {
  (void)d; if (flags) *flags = 0; if (active) *active = 1; return CUDA_SUCCESS;
}
EXPORT CUresult cuInit(unsigned f) { (void)f; return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int* v) { *v = 13000; return CUDA_SUCCESS; }
EXPORT CUresult cuGetProcAddress(const char* name, void** fn, int v, cuuint64_t f, CUdriverProcAddressQueryResult* st) {
  (void)v; (void)f;
  *fn = driver_symbol(name);
  if (st) *st = *fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* name, void** fn, unsigned int v, unsigned long long f,
                                                    enum cudaDriverEntryPointQueryResult* st) {
  (void)v; (void)f;
  *fn = driver_symbol(name);
  if (st) *st = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
EXPORT cudaError_t cudaGetDriverEntryPoint(const char* name, void** fn, unsigned long long f,
                                           enum cudaDriverEntryPointQueryResult* st) {
  return cudaGetDriverEntryPointByVersion(name, fn, 13000, f, st);
}

/* ---- NVML (libc10_cuda.so dlopens libnvidia-ml.so.1; the test puts this
 * library there under that name too).  No fabric, no NVLink, no processes. */
#define NVML_OK 0
#define NVML_NOT_SUPPORTED 3
EXPORT int nvmlInit_v2(void) { return NVML_OK; }
EXPORT int nvmlShutdown(void) { return NVML_OK; }
EXPORT const char* nvmlErrorString(int r) { return r == NVML_OK ? "Success" : "Not Supported"; }
EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) { (void)bus; *device = (void*)0x77; return NVML_OK; }
EXPORT int nvmlDeviceGetGpuFabricInfoV(void* device, void* info) { (void)device; (void)info; return NVML_NOT_SUPPORTED; }
EXPORT int nvmlDeviceGetComputeRunningProcesses(void* device, unsigned* count, void* infos) {
  (void)device; (void)infos; *count = 0; return NVML_OK;
}
EXPORT int nvmlSystemGetCudaDriverVersion_v2(int* v) { *v = 13000; return NVML_OK; }
EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(void* d, unsigned link, int* t) { (void)d; (void)link; (void)t; return NVML_NOT_SUPPORTED; }
EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* d, unsigned link, void* pci) { (void)d; (void)link; (void)pci; return NVML_NOT_SUPPORTED; }

/* ---- A step on real CUDA tensors (tests/cuda_stub/real_step.py): every kernel launch returns at once and
 * computes nothing; copies and sets touch no device memory, and a copy to the host writes zeros (so a
 * GradScaler finds no inf and .item() reads 0); pinned host memory is plain calloc'd memory; a kernel's
 * attributes and occupancy are answered as one block per SM.  cuBLAS is tests/cuda_stub/cublas_stub.c. */
static int on_device(const void* p) { return (uintptr_t)p >= 0x100000000000 && (uintptr_t)p < next_address; }
static cudaError_t copy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
  int to_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                (kind == cudaMemcpyDefault && !on_device(dst));
  int from_host = kind == cudaMemcpyHostToHost || (kind == cudaMemcpyDefault && !on_device(src));
  if (to_host) {
    if (from_host) memmove(dst, src, n);
    else memset(dst, 0, n);
  }
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemcpy(void* d, const void* s, size_t n, enum cudaMemcpyKind k) { return copy(d, s, n, k); }
EXPORT cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) { (void)st; return copy(d, s, n, k); }
EXPORT cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st) { (void)d; (void)v; (void)n; (void)st; return cudaSuccess; }
EXPORT cudaError_t cudaMemset(void* d, int v, size_t n) { (void)d; (void)v; (void)n; return cudaSuccess; }
EXPORT cudaError_t cudaHostAlloc(void** p, size_t n, unsigned f) { (void)f; *p = calloc(1, n ? n : 1); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
EXPORT cudaError_t cudaMallocHost(void** p, size_t n) { return cudaHostAlloc(p, n, 0); }
EXPORT cudaError_t cudaFreeHost(void* p) { free(p); return cudaSuccess; }
EXPORT cudaError_t cudaLaunchKernel(const void* f, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st) { return cudaSuccess; }
EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* c, const void* f, void** a) { return cudaSuccess; }
EXPORT cudaError_t cudaLaunchCooperativeKernel(const void* f, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st) { return cudaSuccess; }
EXPORT cudaError_t cudaFuncSetAttribute(const void* f, enum cudaFuncAttribute a, int v) { return cudaSuccess; }
EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* a, const void* f) {
  memset(a, 0, sizeof *a); a->maxThreadsPerBlock = 1024; a->numRegs = 32; a->binaryVersion = 90; a->ptxVersion = 90; return cudaSuccess; }
EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* f, int b, size_t s) { *n = 1; return cudaSuccess; }
EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* f, int b, size_t s, unsigned fl) { *n = 1; return cudaSuccess; }
EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* p) {
  memset(a, 0, sizeof *a); a->type = on_device(p) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered; a->device = 0;
  a->devicePointer = on_device(p) ? (void*)p : NULL; a->hostPointer = on_device(p) ? NULL : (void*)p; return cudaSuccess; }
