/*
 * Stand-in of libcuda.so.1 for the simulated DGX nodes: the one entry point dgxops reads.
 *
 * A real node's facts read the CUDA version through libcuda's cuDriverGetVersion (ctypes, no
 * process; plugins/module_utils/nvidia_smi.py cuda_version_from_libcuda). The simulated driver
 * packages (src/dgxops/sim/aptrepo.py) install this library as libcuda.so.<driver version>
 * with the libcuda.so.1 link, as libnvidia-compute-<branch> / libcuda1 do, and write the CUDA
 * driver API version of their branch (e.g. 13000 for 13.0) to libcuda-api-version in the
 * simulator's state directory (DGXOPS_SIM_STATE_DIR, as the fake nvidia-smi reads it, else
 * /var/lib/dgxops-sim); removing the
 * package removes both, and the facts fall back to `nvidia-smi --version` as on a node
 * without libcuda. Like the real library, the answer is the installed user-space driver's,
 * whatever kernel module is loaded. Only open/read/close/getenv and string copies: it loads on any glibc.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_DIR "/var/lib/dgxops-sim"
#define VERSION_NAME "/libcuda-api-version"
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3

int cuDriverGetVersion(int *driverVersion)
{
    char path[4096], buf[32];
    const char *dir = getenv("DGXOPS_SIM_STATE_DIR");
    ssize_t n;
    int fd, i, value = 0;

    if (driverVersion == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dir == 0 || *dir == 0)
        dir = STATE_DIR;
    if (strlen(dir) + sizeof(VERSION_NAME) > sizeof(path))
        return CUDA_ERROR_NOT_INITIALIZED;
    strcpy(path, dir);
    strcat(path, VERSION_NAME);
    fd = open(path, O_RDONLY);
    if (fd < 0)
        return CUDA_ERROR_NOT_INITIALIZED;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    for (i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
        value = value * 10 + (buf[i] - '0');
    if (value <= 0)
        return CUDA_ERROR_NOT_INITIALIZED;
    *driverVersion = value;
    return CUDA_SUCCESS;
}
