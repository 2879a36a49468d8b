// hookgate console: the one script. It copies a block's text to the
// clipboard. Everything else works without it.
"use strict";
document.addEventListener("click", function (e) {
  var button = e.target.closest("button[data-copy]");
  if (!button) return;
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source || !navigator.clipboard) return;
  navigator.clipboard.writeText(source.textContent).then(function () {
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = "Copy"; }, 1500);
  });
});
