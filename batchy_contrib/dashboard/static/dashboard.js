// The batchy dashboard's only script: confirm dangerous actions, and refresh the page live.
(function () {
  "use strict";
  // A form or button with data-confirm asks first.
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    var question = (button && button.dataset.confirm) || event.target.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  });
  var every = Number(document.body.dataset.refresh || 0);
  var box = document.getElementById("live");
  if (!every || !box) return;
  box.checked = window.localStorage.getItem("batchy-live") !== "off";
  box.addEventListener("change", function () {
    window.localStorage.setItem("batchy-live", box.checked ? "on" : "off");
  });
  // Swap in a fresh <main> every few seconds; never while someone is choosing
  // jobs, typing in a form or reading an opened traceback.
  function busy() {
    return document.querySelector(
      "main input[type=checkbox]:checked, main details[open], main input:focus, main select:focus"
    );
  }
  window.setInterval(function () {
    if (!box.checked || document.hidden || busy()) return;
    window.fetch(window.location.href, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html || busy()) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        if (fresh) document.querySelector("main").innerHTML = fresh.innerHTML;
      })
      .catch(function () { /* the next tick tries again */ });
  }, every * 1000);
})();
