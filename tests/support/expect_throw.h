// EXPECT_THROW_WITH: the statement throws `type` and its message contains
// `fragment`, so an error test pins what the user reads, not only the type.
#pragma once

#include <gtest/gtest.h>

#include <string>

#define EXPECT_THROW_WITH(statement, type, fragment)                                  \
  EXPECT_THROW(                                                                       \
      {                                                                               \
        try {                                                                         \
          statement;                                                                  \
        } catch (const type& error) {                                                 \
          EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)      \
              << "message \"" << error.what() << "\" lacks \"" << (fragment) << "\""; \
          throw;                                                                      \
        }                                                                             \
      },                                                                              \
      type)
