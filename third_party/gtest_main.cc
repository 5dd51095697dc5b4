// gtest main shared by all tests (Debian ships libgtest_main, but a static
// build wants every archive in one link group; this keeps the main local).
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
