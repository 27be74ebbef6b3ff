/* TEMPORARY: lets libcgr.a link while src/comm lands (remove after). */
#pragma weak cgr_allreduce
#pragma weak cgr_allgather
#pragma weak cgr_reducescatter
#pragma weak cgr_reduce
#pragma weak cgr_broadcast
#pragma weak cgr_gather
#pragma weak cgr_scatter
#pragma weak cgr_alltoall
#pragma weak cgr_comm_create
#pragma weak cgr_comm_abort
#pragma weak cgr_comm_destroy
#pragma weak cgr_comm_size
#pragma weak cgr_comm_errmsg
#pragma weak cgr_dtype_size
