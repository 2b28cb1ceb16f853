// Semantics probe for graph memory nodes (not committed).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, (int)e_, cudaGetErrorString(e_)); } } while (0)
static const size_t MiB = 1 << 20;
static long long used() { size_t f, t; cudaMemGetInfo(&f, &t); return (long long)(t - f); }
static long long base;
#define U(label) printf("%-58s used %+8.1f MiB\n", label, (used() - base) / (double)MiB)
static void reserved(const char *l) {
  cuuint64_t r = 0, u = 0;
  cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &r);
  cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &u);
  printf("   %-40s graph reserved %.1f MiB used %.1f MiB\n", l, r / (double)MiB, u / (double)MiB);
}
static cudaGraph_t alloc_graph(size_t n, void **p, bool with_free) {
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams a = {};
  a.poolProps.allocType = cudaMemAllocationTypePinned;
  a.poolProps.location.type = cudaMemLocationTypeDevice;
  a.poolProps.location.id = 0;
  a.bytesize = n;
  cudaGraphNode_t an, fn;
  CK(cudaGraphAddMemAllocNode(&an, g, nullptr, 0, &a));
  *p = a.dptr;
  if (with_free) CK(cudaGraphAddMemFreeNode(&fn, g, &an, 1, a.dptr));
  return g;
}
int main() {
  CK(cudaFree(0));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  base = used();
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  const char *names[] = {"cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz", "cuGraphLaunch_ptsz", "cuGraphAddNode", "cuGraphAddNode_v2", "cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo_v3", "cuStreamIsCapturing", "cuStreamIsCapturing_ptsz", "cuGraphExecUpdate_v2"};
  for (const char *n : names) printf("dlsym %-36s %s\n", n, h && dlsym(h, n) ? "yes" : "no");
  const char *rnames[] = {"cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams", "cudaGraphInstantiateWithParams_ptsz", "cudaGraphLaunch_ptsz", "cudaGraphAddNode", "cudaGraphAddNode_v2"};
  for (const char *n : rnames) printf("dlsym(RTLD_DEFAULT) %-36s %s\n", n, dlsym(RTLD_DEFAULT, n) ? "yes" : "no");
  // 1. explicit alloc node, never freed
  void *p; cudaGraph_t g = alloc_graph(64 * MiB, &p, false);
  U("1 alloc node created (64 MiB)"); reserved("");
  cudaGraphExec_t e; CK(cudaGraphInstantiate(&e, g, 0));
  U("1 instantiated");
  CK(cudaGraphUpload(e, s)); CK(cudaStreamSynchronize(s));
  U("1 uploaded"); reserved("");
  CK(cudaGraphLaunch(e, s)); CK(cudaStreamSynchronize(s));
  U("1 launched"); reserved("");
  printf("relaunch without free -> %d\n", (int)cudaGraphLaunch(e, s)); cudaGetLastError(); CK(cudaStreamSynchronize(s));
  CK(cudaGraphExecDestroy(e)); U("1 exec destroyed");
  CK(cudaGraphDestroy(g)); U("1 graph destroyed"); reserved("");
  CK(cudaDeviceGraphMemTrim(0)); U("1 trimmed"); reserved("");
  printf("cudaFree(graph ptr) after destroy -> %d\n", (int)cudaFree(p)); cudaGetLastError();
  U("1 after cudaFree"); reserved("");
  CK(cudaDeviceGraphMemTrim(0)); U("1 trimmed"); reserved("");
  // 2. auto free on launch, exec destroy with outstanding allocation
  g = alloc_graph(32 * MiB, &p, false);
  CK(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int i = 0; i < 3; i++) { CK(cudaGraphLaunch(e, s)); CK(cudaStreamSynchronize(s)); }
  U("2 autofree launched x3"); reserved("");
  CK(cudaGraphExecDestroy(e)); CK(cudaGraphDestroy(g)); CK(cudaStreamSynchronize(s));
  U("2 autofree exec+graph destroyed"); reserved("");
  printf("cudaFree(autofree ptr) after destroy -> %d\n", (int)cudaFree(p)); cudaGetLastError();
  CK(cudaDeviceGraphMemTrim(0)); U("2 trimmed"); reserved("");
  // 3. captured cudaMallocAsync, destroyed unlaunched
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult cr = cuStreamIsCapturing((CUstream)s, &st);
  void *q = nullptr; CK(cudaMallocAsync(&q, 32 * MiB, s));
  CUstreamCaptureStatus st2 = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult cr2 = cuStreamIsCapturing((CUstream)s, &st2);
  CK(cudaStreamEndCapture(s, &g));
  printf("isCapturing during capture -> %d status %d; after alloc -> %d status %d\n", (int)cr, (int)st, (int)cr2, (int)st2);
  U("3 captured 32 MiB cudaMallocAsync");
  size_t n = 0; CK(cudaGraphGetNodes(g, nullptr, &n));
  cudaGraphNode_t nodes[8]; CK(cudaGraphGetNodes(g, nodes, &n));
  for (size_t i = 0; i < n; i++) {
    cudaGraphNodeType t; CK(cudaGraphNodeGetType(nodes[i], &t));
    if (t == cudaGraphNodeTypeMemAlloc) { cudaMemAllocNodeParams a; CK(cudaGraphMemAllocNodeGetParams(nodes[i], &a)); printf("captured node dptr == q: %d bytes %zu loc %d/%d\n", a.dptr == q, a.bytesize, (int)a.poolProps.location.type, a.poolProps.location.id); }
  }
  CK(cudaGraphDestroy(g)); U("3 destroyed unlaunched");
  // 4. alloc + free in one graph launched 3 times
  g = alloc_graph(16 * MiB, &p, true);
  CK(cudaGraphInstantiate(&e, g, 0));
  for (int i = 0; i < 3; i++) { CK(cudaGraphLaunch(e, s)); CK(cudaStreamSynchronize(s)); }
  U("4 alloc+free x3"); reserved("");
  CK(cudaGraphExecDestroy(e)); CK(cudaGraphDestroy(g));
  // 5. alloc in A, freed by cudaFreeAsync outside after launch; and freed by graph B's free node
  g = alloc_graph(8 * MiB, &p, false);
  CK(cudaGraphInstantiate(&e, g, 0)); CK(cudaGraphLaunch(e, s));
  CK(cudaFreeAsync(p, s)); CK(cudaStreamSynchronize(s));
  U("5 A launched, cudaFreeAsync outside"); reserved("");
  CK(cudaGraphLaunch(e, s)); CK(cudaStreamSynchronize(s));
  cudaGraph_t gb; CK(cudaGraphCreate(&gb, 0)); cudaGraphNode_t fn; CK(cudaGraphAddMemFreeNode(&fn, gb, nullptr, 0, p));
  cudaGraphExec_t eb; CK(cudaGraphInstantiate(&eb, gb, 0)); CK(cudaGraphLaunch(eb, s)); CK(cudaStreamSynchronize(s));
  U("5 A relaunched, freed by B's free node"); reserved("");
  // captured cudaFreeAsync of a cudaMalloc pointer
  void *m = nullptr; CK(cudaMalloc(&m, MiB));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaError_t fe = cudaFreeAsync(m, s);
  cudaGraph_t gc; cudaError_t ee = cudaStreamEndCapture(s, &gc);
  printf("captured cudaFreeAsync(cudaMalloc ptr) -> %d, end capture -> %d\n", (int)fe, (int)ee); cudaGetLastError();
  CK(cudaDeviceGraphMemTrim(0)); U("end trimmed"); reserved("");
  return 0;
}
