# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Executor sizing for Spark with the RAPIDS Accelerator on GPU nodes.

Pure functions, integer arithmetic only (no floats: ``80 * 1.2`` is
``96.00000000000001`` in binary floating point, which would round the wrong
way).  Every rule is written down here once and repeated in the role README.

Units
-----
nvidia-smi reports ``memory.total`` in MiB (an A100-SXM4-80GB reports
81920 MiB, an A100-SXM4-40GB 40960 MiB, an H100-80GB-HBM3 81559 MiB, an
H200 143771 MiB).  Spark's ``g`` suffix is binary (GiB).  The guide's
"GPU memory (GB)" is therefore taken as **GiB rounded to the nearest whole
GiB, halves up**: ``gpu_gib = (mib + 512) // 1024``.  That gives 80 for the
A100-80GB and for the H100 (79.65 GiB), 40 for the A100-40GB and 140 for the
H200 (140.40 GiB).

Guide rule (guide 001 section 2.1): executor memory (GB) = GPU memory (GB)
x 1.2 + 2 GB.  Computed as ``ceil(gpu_gib * 6 / 5) + 2`` GiB, rendered with
the ``g`` suffix: A100-80GB -> 98g, A100-40GB -> 50g, H200 -> 170g.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MIB_PER_GIB = 1024

# Executor memory = GPU memory x 6/5 + 2 GiB (guide 001 section 2.1).
EXECUTOR_MEMORY_NUM = 6
EXECUTOR_MEMORY_DEN = 5
EXECUTOR_MEMORY_RESERVE_GIB = 2

# spark-rapids supports exactly one GPU per executor.
MAX_EXECUTOR_CORES = 16          # NVIDIA maintainers' HGX/DGX suggestion: 16 cores per executor
MAX_CONCURRENT_GPU_TASKS = 4     # tuning guide: 2-4; autotuner caps at 4
GIB_PER_CONCURRENT_GPU_TASK_X2 = 15  # one concurrent task per 7.5 GiB of GPU memory
PINNED_POOL_MAX_GIB = 4          # tuning guide example and autotuner cap
PINNED_POOL_UNKNOWN_HOST_GIB = 2  # autotuner default when host memory is unknown
PINNED_POOL_HOST_SHARE_DEN = 16  # all executors' pinned pools together <= 1/16 of host RAM


def mib_to_gib(mib):
    """Whole GiB from MiB, rounded to the nearest GiB with halves going up."""
    return (int(mib) + MIB_PER_GIB // 2) // MIB_PER_GIB


def executor_memory_gib(gpu_gib):
    """Guide 001 section 2.1: ceil(gpu_gib x 1.2) + 2, in whole GiB."""
    gpu_gib = int(gpu_gib)
    scaled = -(-(gpu_gib * EXECUTOR_MEMORY_NUM) // EXECUTOR_MEMORY_DEN)  # ceiling division
    return scaled + EXECUTOR_MEMORY_RESERVE_GIB


def executor_cores(cpus_per_node, executors_per_node):
    """CPU cores per executor: the node's CPUs shared by its executors, 1..16."""
    if not cpus_per_node or not executors_per_node:
        return MAX_EXECUTOR_CORES
    return max(1, min(MAX_EXECUTOR_CORES, int(cpus_per_node) // int(executors_per_node)))


def task_gpu_amount(cores):
    """spark.task.resource.gpu.amount = 1/cores, as a string Spark accepts.

    Spark accepts a fraction <= 0.5 or a whole number; it schedules
    floor(1/amount) tasks per GPU.  Six decimals are enough for every core
    count up to 16 to give floor(1/amount) == cores.
    """
    cores = int(cores)
    if cores <= 1:
        return "1"
    # Truncate (never round up): a rounded-up fraction such as 0.166667 for
    # 6 cores would let Spark fit only floor(1/0.166667) = 5 tasks per GPU.
    micro = 1000000 // cores
    return ("0.%06d" % micro).rstrip("0")


def concurrent_gpu_tasks(gpu_gib):
    """One concurrent GPU task per 7.5 GiB of GPU memory, between 1 and 4."""
    return max(1, min(MAX_CONCURRENT_GPU_TASKS, (int(gpu_gib) * 2) // GIB_PER_CONCURRENT_GPU_TASK_X2))


def pinned_pool_gib(host_memory_mib, executors_per_node):
    """Pinned host memory pool per executor in GiB (allocated once per executor).

    4 GiB (the guide's example and the autotuner's cap) unless all the
    executors' pools together would take more than 1/16 of host memory;
    then the largest whole GiB that fits (at least 1).  2 GiB when the host
    memory is unknown (the autotuner's default).
    """
    if not host_memory_mib or not executors_per_node:
        return PINNED_POOL_UNKNOWN_HOST_GIB
    share_gib = (int(host_memory_mib) // MIB_PER_GIB) // PINNED_POOL_HOST_SHARE_DEN
    return max(1, min(PINNED_POOL_MAX_GIB, share_gib // int(executors_per_node)))


def memory_overhead_gib(executor_gib, pinned_gib):
    """Off-heap allowance: the pinned pool plus 10% of the heap (rounded up)."""
    return int(pinned_gib) + -(-int(executor_gib) // 10)


def shuffle_partitions(cluster_gpus, concurrent):
    """spark.sql.shuffle.partitions ~ GPUs in the cluster x concurrent GPU tasks."""
    return max(1, int(cluster_gpus) * int(concurrent))


# Unified memory (DGX Spark / GB10, Grace): the GPU allocates from the same LPDDR5x the JVM lives in,
# and CUDA reports the whole system memory as the GPU's.  The guide's executor memory
# (GPU memory x 1.2 + 2) would then count the same bytes twice: heap ~ GPU pool ~ all memory.
UNIFIED_OS_RESERVE_MIN_GIB = 8   # kept for the OS, the driver and page cache
UNIFIED_OS_RESERVE_DEN = 8       # ... or 1/8 of the memory, whichever is larger
UNIFIED_GPU_SHARE_DEN = 2        # the RAPIDS pool gets half of the rest, the executor the other half


def unified_split(host_memory_mib, pinned_gib, direct_memory_gib=0, gpu_budget_mib=None):
    """Split one shared memory pool between the OS, the RAPIDS GPU pool and one executor JVM.

    Returns (reserve_gib, gpu_pool_gib, heap_gib, overhead_gib) with
    reserve + gpu_pool + heap + overhead <= total: every byte is counted once.
    """
    total_gib = int(host_memory_mib) // MIB_PER_GIB
    reserve = max(UNIFIED_OS_RESERVE_MIN_GIB, total_gib // UNIFIED_OS_RESERVE_DEN)
    usable = max(0, total_gib - reserve)
    if gpu_budget_mib:
        gpu_pool = min(int(gpu_budget_mib) // MIB_PER_GIB, usable)
    else:
        gpu_pool = usable // UNIFIED_GPU_SHARE_DEN
    host_side = usable - gpu_pool
    heap = 0
    # largest heap with heap + pinned + max(ceil(heap / 10), direct) <= host_side
    for candidate in range(host_side, 0, -1):
        if candidate + int(pinned_gib) + max(-(-candidate // 10), int(direct_memory_gib)) <= host_side:
            heap = candidate
            break
    overhead = int(pinned_gib) + max(-(-heap // 10), int(direct_memory_gib)) if heap else 0
    return reserve, gpu_pool, heap, overhead


def size_unified(host_memory_mib, cpus_per_node=None, cluster_nodes=1, direct_memory_gib=0,
                 gpu_budget_mib=None):
    """Sizing for a single-GPU unified-memory node (DGX Spark / GB10)."""
    total_mib = int(host_memory_mib)
    pinned = pinned_pool_gib(total_mib, 1)
    reserve, gpu_pool, heap, overhead = unified_split(total_mib, pinned, direct_memory_gib, gpu_budget_mib)
    result = size(1, max(gpu_pool, 1) * MIB_PER_GIB, cpus_per_node=cpus_per_node, host_memory_mib=total_mib,
                  cluster_nodes=cluster_nodes)
    total_gib = total_mib // MIB_PER_GIB
    # allocFraction is a fraction of what CUDA reports as the GPU's memory: the whole pool here.
    fraction = "%.4f" % (float(gpu_pool) / total_gib) if total_gib else "0"
    fraction = fraction.rstrip("0").rstrip(".")
    result.update({
        "unified_memory": True,
        "unified_total_gib": total_gib,
        "unified_os_reserve_gib": reserve,
        "gpu_pool_gib": gpu_pool,
        "gpu_alloc_fraction": fraction,
        "executor_memory_gib": heap,
        "executor_memory": "%dg" % heap,
        "pinned_pool_gib": pinned,
        "pinned_pool": "%dg" % pinned,
        "memory_overhead_gib": overhead,
        "memory_overhead": "%dg" % overhead,
        "node_memory_needed_gib": heap + overhead + gpu_pool,
        "formula": "unified memory: %d GiB shared by GPU and host, %d GiB kept for the OS, RAPIDS pool %d GiB "
                   "(allocFraction %s), executor heap %dg + overhead %dg; the guide's GPU memory x 1.2 + 2 is not "
                   "applied (it would count the GPU's bytes twice)"
                   % (total_gib, reserve, gpu_pool, fraction, heap, overhead),
    })
    return result


def size(gpus_per_node, gpu_memory_mib, cpus_per_node=None, host_memory_mib=None,
         cluster_nodes=1):
    """All computed values for one node, as a dict of plain ints/strings.

    ``gpus_per_node`` is the number of executors per node (one GPU, or one
    MIG device, per executor); ``gpu_memory_mib`` the memory of one of them.
    """
    gpus_per_node = int(gpus_per_node)
    gpu_gib = mib_to_gib(gpu_memory_mib)
    exec_gib = executor_memory_gib(gpu_gib)
    cores = executor_cores(cpus_per_node, gpus_per_node)
    concurrent = concurrent_gpu_tasks(gpu_gib)
    pinned = pinned_pool_gib(host_memory_mib, gpus_per_node)
    overhead = memory_overhead_gib(exec_gib, pinned)
    cluster_gpus = gpus_per_node * max(1, int(cluster_nodes))
    threads = max(1, int(cpus_per_node) // gpus_per_node) if cpus_per_node else 20
    result = {
        "gpus_per_node": gpus_per_node,
        "gpu_memory_mib": int(gpu_memory_mib),
        "gpu_memory_gib": gpu_gib,
        "executors_per_node": gpus_per_node,
        "executor_memory_gib": exec_gib,
        "executor_memory": "%dg" % exec_gib,
        "executor_cores": cores,
        "task_gpu_amount": task_gpu_amount(cores),
        "concurrent_gpu_tasks": concurrent,
        "pinned_pool_gib": pinned,
        "pinned_pool": "%dg" % pinned,
        "memory_overhead_gib": overhead,
        "memory_overhead": "%dg" % overhead,
        "cluster_nodes": max(1, int(cluster_nodes)),
        "cluster_gpus": cluster_gpus,
        "shuffle_partitions": shuffle_partitions(cluster_gpus, concurrent),
        "shuffle_threads": threads,
        "node_memory_needed_gib": gpus_per_node * (exec_gib + overhead),
        "formula": "executor memory = ceil(%d GiB x 1.2) + 2 GiB = %dg (GPU memory %d MiB -> %d GiB)"
                   % (gpu_gib, exec_gib, int(gpu_memory_mib), gpu_gib),
    }
    return result
