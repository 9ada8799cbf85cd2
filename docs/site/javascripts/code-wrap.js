// A wrapped line of code continues 4 columns right of its own indentation (stylesheets/extra.css),
// as an editor's soft wrap does: each line's span gets its count of leading spaces as --acp-indent.
// pymdownx.highlight puts each line of a fenced block in a span (line_spans); an indented block (a
// docstring's "::" literal block in the API reference) comes as plain text, split into lines here.
document$.subscribe(() => {
  for (const code of document.querySelectorAll(".md-typeset pre > code")) {
    if (code.childElementCount === 0 && code.textContent.includes("\n")) {
      code.replaceChildren(
        ...code.textContent.split(/(?<=\n)/).map((text) => {
          const line = document.createElement("span")
          line.className = "acp-line"
          line.textContent = text
          return line
        }),
      )
    }
    for (const line of code.querySelectorAll(':scope > [id^="__span-"], :scope > .acp-line')) {
      const indent = /^ */.exec(line.textContent)[0].length
      if (indent > 0) line.style.setProperty("--acp-indent", String(indent))
    }
  }
})
