function openFromHash(){
  var id = decodeURIComponent(location.hash.slice(1));
  var panel = id && document.getElementById(id);
  if (panel && panel.tagName === 'DETAILS') { panel.open = true; panel.scrollIntoView({block: 'start'}); }
}
window.addEventListener('hashchange', openFromHash);
document.addEventListener('DOMContentLoaded', function(){
  openFromHash();
  document.documentElement.setAttribute('data-ready', '1');
});
