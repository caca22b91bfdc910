// examples/mini_engine/options.h: the command line of the examples that run the mini engine's
// model (mini_engine, serve): --name=value options, each bound to a field of the example's
// configuration, with the usage text and every refusal made from the same table. A refusal
// names the option and the value ("mini_engine: --threads=0 is below its minimum, 1").
#ifndef KVRING_EXAMPLES_MINI_ENGINE_OPTIONS_H_
#define KVRING_EXAMPLES_MINI_ENGINE_OPTIONS_H_

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mini_engine {

class Options {
 public:
  // `program` prefixes the usage line and every message.
  explicit Options(std::string program) : program_(std::move(program)) {}

  // --name=one|two|...: one of `choices` (the field keeps its value, the default, unless set).
  void Choice(const char* name, std::vector<std::string> choices, std::string* field,
              const char* help) {
    Option option = Make(name, help);
    option.choices = std::move(choices);
    option.text = field;
    options_.push_back(std::move(option));
  }

  // --name=N: a decimal number in [min, max] (max: at most what the field holds), a multiple of
  // `step`.
  template <typename Field>
  void Number(const char* name, Field* field, const char* help, uint64_t min = 0,
              uint64_t max = std::numeric_limits<Field>::max(), uint64_t step = 1) {
    static_assert(std::is_unsigned<Field>::value, "a number option sets an unsigned field");
    Option option = Make(name, help);
    option.set_number = [field](uint64_t value) { *field = static_cast<Field>(value); };
    option.min = min;
    option.max = std::min<uint64_t>(max, std::numeric_limits<Field>::max());
    option.step = step;
    options_.push_back(std::move(option));
  }

  // --name=VALUE: any text (`value_name` in the usage).
  void Text(const char* name, const char* value_name, std::string* field, const char* help) {
    Option option = Make(name, help);
    option.value_name = value_name;
    option.text = field;
    options_.push_back(std::move(option));
  }

  // --name alone: sets the field to true.
  void Flag(const char* name, bool* field, const char* help) {
    Option option = Make(name, help);
    option.flag = field;
    options_.push_back(std::move(option));
  }

  // Sets the bound fields from argv. Returns false after printing why to stderr (not
  // --option=value, an unknown option, a choice not offered, a value that is not a number or
  // is out of its range); on --help or -h prints the usage and sets *help. A refused command
  // line may have set the fields of the options before the refused one.
  bool Parse(int argc, char** argv, bool* help) const {
    *help = false;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        PrintUsage();
        *help = true;
        return true;
      }
      const size_t eq = arg.find('=');
      const Option* flag = arg.rfind("--", 0) == 0 ? Find(arg.substr(2, eq - 2)) : nullptr;
      if (flag != nullptr && flag->flag != nullptr) {
        if (eq != std::string::npos) return Refuse(arg.substr(0, eq) + " takes no value");
        *flag->flag = true;
        continue;
      }
      if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
        return Refuse("expected --option=value, got '" + arg + "'");
      }
      const std::string name = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
      const Option* option = Find(name);
      if (option == nullptr) return Refuse("unknown option --" + name + " (see --help)");
      if (!Set(*option, value)) return false;
    }
    return true;
  }

  // Prints "program: message" to stderr and returns false (for an example's checks across
  // options).
  bool Refuse(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n", program_.c_str(), message.c_str());
    return false;
  }

  void PrintUsage() const {
    std::printf("usage: %s [--option=value ...]\n", program_.c_str());
    for (const Option& option : options_) {
      const std::string left =
          "  --" + option.name + (option.flag != nullptr ? "" : "=" + ValueName(option));
      std::printf("%-25s", left.c_str());
      if (left.size() >= 25) std::printf("\n%25s", "");
      // The help text's lines, each after the column.
      const std::string& help = option.help;
      for (size_t begin = 0; begin < help.size();) {
        size_t end = help.find('\n', begin);
        if (end == std::string::npos) end = help.size();
        std::printf("%s%s\n", begin == 0 ? "" : "                         ",
                    help.substr(begin, end - begin).c_str());
        begin = end + 1;
      }
    }
  }

 private:
  struct Option {
    std::string name;
    std::string help;
    std::string value_name = "N";
    std::vector<std::string> choices;          // a choice's values
    std::string* text = nullptr;               // a choice or a text
    bool* flag = nullptr;                      // a flag
    std::function<void(uint64_t)> set_number;  // a number: sets the field (<= max)
    uint64_t min = 0;
    uint64_t max = 0;
    uint64_t step = 1;
  };

  static Option Make(const char* name, const char* help) {
    Option option;
    option.name = name;
    option.help = help;
    return option;
  }

  static std::string ValueName(const Option& option) {
    if (option.choices.empty()) return option.value_name;
    std::string names;
    for (const std::string& choice : option.choices) names += (names.empty() ? "" : "|") + choice;
    return names;
  }

  const Option* Find(const std::string& name) const {
    for (const Option& option : options_) {
      if (option.name == name) return &option;
    }
    return nullptr;
  }

  bool Set(const Option& option, const std::string& value) const {
    const std::string given = "--" + option.name + "=" + value;
    if (!option.choices.empty()) {
      for (const std::string& choice : option.choices) {
        if (choice == value) {
          *option.text = value;
          return true;
        }
      }
      return Refuse(given + " is not one of " + ValueName(option));
    }
    if (option.text != nullptr) {
      *option.text = value;
      return true;
    }
    uint64_t parsed = 0;
    if (!ParseUint(value, &parsed)) return Refuse(given + " is not a decimal number");
    if (parsed < option.min) {
      return Refuse(given + " is below its minimum, " + std::to_string(option.min));
    }
    if (parsed > option.max) {
      return Refuse(given + " is above its maximum, " + std::to_string(option.max));
    }
    if (parsed % option.step != 0) {
      return Refuse(given + " is not a multiple of " + std::to_string(option.step));
    }
    option.set_number(parsed);
    return true;
  }

  // Sets *value to the decimal number `text`; false for anything else (a sign, spaces, an
  // empty text, a number past 2^64 - 1).
  static bool ParseUint(const std::string& text, uint64_t* value) {
    if (text.empty() || text[0] < '0' || text[0] > '9') return false;
    errno = 0;
    char* end = nullptr;
    const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);  // NOLINT
    if (errno == ERANGE || *end != '\0') return false;
    *value = parsed;
    return true;
  }

  std::string program_;
  std::vector<Option> options_;
};

}  // namespace mini_engine

#endif  // KVRING_EXAMPLES_MINI_ENGINE_OPTIONS_H_
