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

/* One GPU's health readings (agent/health.h says what they mean); -1: unknown. */
struct dt_gpu_health {
	int index;
	int lost;                       /* NVML_ERROR_GPU_IS_LOST: fell off the bus */
	int reset_required;             /* NVML_ERROR_RESET_REQUIRED */
	long long ecc_volatile_dbe;     /* uncorrected ECC errors since the last reset */
	long long ecc_aggregate_dbe;    /* ... over the GPU's life */
	int retired_pages_pending;      /* pages waiting to be retired at the next reset */
	int remap_pending, remap_failure;   /* row remapping (A100 and later) */
	unsigned long long throttle;    /* clock event reasons, DT_THROTTLE_* bits */
	int temperature;                /* degrees C */
	int xid[16], nr_xid;            /* critical XID events since the last reading */
};

#define DT_THROTTLE_HW_SLOWDOWN 0x8ULL
#define DT_THROTTLE_HW_THERMAL 0x40ULL
#define DT_THROTTLE_POWER_BRAKE 0x80ULL

/*
 * Read GPU `index`'s health into h; the XIDs are those NVML reported for it
 * since the previous call (an event set registered on first use).  -1 when
 * NVML is not usable.
 */
int dt_nvml_health(int index, struct dt_gpu_health *h);

/* Load and initialise NVML once; 0 if usable, -1 if not (see dt_nvml_error). */
int dt_nvml_open(void);
const char *dt_nvml_error(void);
/* Number of GPUs (0 when NVML is not usable). */
int dt_nvml_count(void);
/* Fill g for GPU `index`; -1 on failure. */
int dt_nvml_query(int index, struct dt_gpu *g);

#endif
