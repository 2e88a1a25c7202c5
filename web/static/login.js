// The login page: shows why the last attempt failed, and logs in by itself
// from the dev banner's link (/admin/login#token=…; a fragment never
// reaches the server or its logs).
(function () {
  'use strict';
  var messages = {
    wrong: 'Wrong token.',
    limited: 'Too many wrong tokens: wait a minute and try again.',
    origin: 'Cross-site login refused.',
    bad: 'Could not read the form.'
  };
  var e = new URLSearchParams(location.search).get('e');
  var err = document.getElementById('error');
  if (e && messages[e]) {
    err.textContent = messages[e];
    err.hidden = false;
  }
  var m = /^#token=(.+)$/.exec(location.hash);
  if (m) {
    history.replaceState(null, '', location.pathname);
    document.getElementById('token').value = decodeURIComponent(m[1]);
    document.getElementById('login').submit();
  }
})();
