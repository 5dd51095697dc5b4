// ThreadSanitizer suppressions compiled into binaries built with --config=tsan.
// kvferry's own locks (common/mutex.h) are std::mutex underneath and need none.
// Debian's prebuilt Abseil and gRPC are not instrumented: orderings made inside
// them are invisible to TSan, which then reports accesses that those libraries
// order (a waiter's absl::Condition evaluated by the unlocking thread, gRPC's
// pollers, a call's status message written by a gRPC poller thread and read by
// gRPC's own header code, grpc::internal::CallOpClientRecvStatus, compiled into
// our binaries). A race is suppressed when gRPC, protobuf or Abseil code is on
// one of its stacks; races between kvferry frames only are still reported.
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "race:absl::\n"
         "race:libabsl_\n"
         "called_from_lib:libabsl_synchronization.so.20220623\n"
         "called_from_lib:libgrpc.so.29\n"
         "called_from_lib:libgpr.so.29\n"
         "called_from_lib:libgrpc++.so.1.51\n"
         "race:grpc_core::\n"
         "race:grpc_event_engine::\n"
         "race:grpc::internal::\n"
         "race:grpc::CompletionQueue::\n"
         "race:libgrpc.so.29\n"
         "race:libgrpc++.so.1.51\n"
         "race:libgpr.so.29\n"
         "race:libprotobuf.so.32\n";
}
#endif
