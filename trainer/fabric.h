/*
 * fabric.h - `dttrain --fabric full|quick`: the fabric test of the
 * pre-flight gate (docs/agents.md, "Fabric gate"), one rank per node under
 * mpirun.
 *
 *   pairs        every pair of ranks, in N-1 rounds of disjoint pairs
 *                (round-robin pairing), the pairs of a round at once:
 *                latency (best half round trip of 8-byte ping-pongs), and in
 *                full mode bandwidth each way (best of --fabric-iters
 *                messages of --fabric-bytes, each acknowledged)
 *   all-reduce   full mode, after the pairs: best of --fabric-iters sum
 *                all-reduces of --fabric-bytes (bus bandwidth 2(N-1)/N)
 *
 * Every transfer has a deadline (--fabric-timeout ms; a round ends by one
 * too), so a throttled or cut link is reported as failed instead of
 * hanging the test; rank 0 collects every rank's row point-to-point with the
 * same deadline and prints one JSON document (also to --fabric-out, written
 * whole through a rename).  MPI on host memory, on CPUs and GPUs alike: it
 * measures the network MPI uses (btl tcp here), not NVLink or GPUDirect.
 * Exit 0 when every transfer finished, else 1 (rank 0 then ends the job with
 * MPI_Abort after writing, since transfers that never finished cannot be
 * waited for).
 */
#ifndef DT_TRAINER_FABRIC_H
#define DT_TRAINER_FABRIC_H

#include "strbuf.h"
#include "trainer/comm.h"
#include "trainer/config.h"

/*
 * The partner of rank `me` in round r of the round-robin pairing of n ranks
 * (n - 1 rounds for even n, n for odd), or -1 when it sits the round out.
 * Over all rounds every pair meets exactly once.
 */
int fabric_partner(int me, int n, int r);
int fabric_rounds(int n);

/* Run the test; 0 all transfers finished, 1 some failed, 2 usage (err). */
int fabric_run(const struct train_config *cfg, struct comm *c, struct strbuf *err);

#endif
