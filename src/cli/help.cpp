#include "cli/help.h"

#include <memory>

namespace scaletrain::cli {

namespace {

class ExamplesFormatter : public CLI::Formatter {
 public:
  explicit ExamplesFormatter(std::string examples) : examples_(std::move(examples)) {}
  std::string make_description(const CLI::App* app) const override {
    return CLI::Formatter::make_description(app) + "\nExamples:\n" + examples_ + "\n\n";
  }

 private:
  std::string examples_;
};

}  // namespace

void SetHelpExamples(CLI::App* cmd, const std::string& examples) {
  cmd->formatter(std::make_shared<ExamplesFormatter>(examples));
}

}  // namespace scaletrain::cli
