/* A test double of the cuBLAS and cuBLASLt entry points that PyTorch 2.14.1 calls in a training step
 * (libtorch_cuda.so's imports), preloaded beside cuda_stub.c (tests/cuda_stub/build.py): a handle is a
 * number, a matrix product computes nothing, and cuBLASLt's heuristic offers one algorithm that needs no
 * workspace.  PyTorch allocates cuBLAS's workspaces itself, through its caching allocator, as on a GPU.
 * The types are declared here: cublas_api.h needs CUDA's C++ headers.  Only these entry points: a product PyTorch
 * routes to another (float64 or complex matrices, a float16 dot) reaches the real cuBLAS with a made-up handle
 * and crashes; the steps of tests/cuda_stub/real_step.py call none. */
#include <stddef.h>
typedef int cublasStatus_t; typedef void* cublasHandle_t; typedef void* cublasLtHandle_t; typedef void* cudaStream_t;
typedef int cublasOperation_t, cudaDataType, cudaDataType_t, cublasComputeType_t, cublasGemmAlgo_t, cublasMath_t,
    cublasPointerMode_t, cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t, cublasLtMatmulPreferenceAttributes_t;
typedef void *cublasLtMatmulDesc_t, *cublasLtMatrixLayout_t, *cublasLtMatmulPreference_t;
typedef struct { unsigned long long data[8]; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; }
    cublasLtMatmulHeuristicResult_t;
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_DEFAULT_MATH 0
#define CUBLAS_POINTER_MODE_HOST 0
#include <string.h>
#include <stdint.h>
#define EXPORT __attribute__((visibility("default")))
static uintptr_t next_object = 0x5000;
#define OK return CUBLAS_STATUS_SUCCESS
EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { *h = (cublasHandle_t)(next_object += 16); OK; }
EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { (void)h; OK; }
EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { (void)h; (void)s; OK; }
EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* w, size_t n) { (void)h; (void)w; (void)n; OK; }
EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { (void)h; (void)m; OK; }
EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* m) { (void)h; *m = CUBLAS_DEFAULT_MATH; OK; }
EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t m) { (void)h; (void)m; OK; }
EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t* m) { (void)h; *m = CUBLAS_POINTER_MODE_HOST; OK; }
EXPORT cublasStatus_t cublasSetSmCountTarget(cublasHandle_t h, int n) { (void)h; (void)n; OK; }
EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t a, cublasOperation_t b, int m, int n, int k,
    const void* al, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb, const void* be,
    void* C, cudaDataType ct, int ldc, cublasComputeType_t c, cublasGemmAlgo_t g) { OK; }
EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t a, cublasOperation_t b, int m, int n,
    int k, const void* al, const void* A, cudaDataType at, int lda, long long sa, const void* B, cudaDataType bt, int ldb,
    long long sb, const void* be, void* C, cudaDataType ct, int ldc, long long sc, int bc, cublasComputeType_t c,
    cublasGemmAlgo_t g) { OK; }
EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t a, cublasOperation_t b, int m, int n, int k,
    const float* al, const float* A, int lda, const float* B, int ldb, const float* be, float* C, int ldc) { OK; }
EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t a, cublasOperation_t b, int m, int n,
    int k, const float* al, const float* A, int lda, long long sa, const float* B, int ldb, long long sb, const float* be,
    float* C, int ldc, long long sc, int bc) { OK; }
EXPORT cublasStatus_t cublasSgemv_v2(cublasHandle_t h, cublasOperation_t t, int m, int n, const float* al, const float* A,
    int lda, const float* x, int ix, const float* be, float* y, int iy) { OK; }
EXPORT cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float* x, int ix, const float* y, int iy, float* r) { (void)r; OK; }  /* r: a device address */
/* cuBLASLt */
EXPORT size_t cublasLtGetVersion(void) { return 130000; }
EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = (cublasLtHandle_t)(next_object += 16); OK; }
EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { (void)h; OK; }
EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t c, cudaDataType_t s) { *d = (cublasLtMatmulDesc_t)(next_object += 16); OK; }
EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { (void)d; OK; }
EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* b, size_t n) { OK; }
EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld) { *l = (cublasLtMatrixLayout_t)(next_object += 16); OK; }
EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { (void)l; OK; }
EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void* b, size_t n) { OK; }
EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = (cublasLtMatmulPreference_t)(next_object += 16); OK; }
EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { (void)p; OK; }
EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void* b, size_t n) { OK; }
EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int n,
    cublasLtMatmulHeuristicResult_t* r, int* count) {
  memset(r, 0, sizeof *r * (n > 0 ? 1 : 0)); if (n > 0) r[0].state = CUBLAS_STATUS_SUCCESS; *count = n > 0; OK; }
EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* al, const void* A,
    cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* be, const void* C, cublasLtMatrixLayout_t c,
    void* D, cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t* g, void* w, size_t wn, cudaStream_t s) { OK; }
