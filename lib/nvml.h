/*
 * nvml.h - GPU inventory through NVML, loaded at run time.
 *
 * libnvidia-ml.so.1 comes with the NVIDIA driver, not with the CUDA toolkit,
 * so dtagent does not link it: dt_nvml_open() dlopen()s it and resolves the
 * few functions used.  Without it (no driver, CPU node) the count is 0 and
 * dt_nvml_error() says why.  Thread-safe.
 */
#ifndef DT_NVML_H
#define DT_NVML_H

#define DT_GPU_MAX_PROCS 32

struct dt_gpu_proc {
	unsigned pid;
	unsigned long long used_memory;   /* bytes */
};

struct dt_gpu {
	int index;
	char name[96];
	char uuid[96];
	unsigned long long memory_total, memory_used;   /* bytes */
	int utilization;                                /* % over the last sample period */
	int nr_procs;
	struct dt_gpu_proc procs[DT_GPU_MAX_PROCS];
};

/* Load and initialise NVML once; 0 if usable, -1 if not (see dt_nvml_error). */
int dt_nvml_open(void);
const char *dt_nvml_error(void);
/* Number of GPUs (0 when NVML is not usable). */
int dt_nvml_count(void);
/* Fill g for GPU `index`; -1 on failure. */
int dt_nvml_query(int index, struct dt_gpu *g);

#endif
